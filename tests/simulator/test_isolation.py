"""Issue item 6: the generator shares no pattern code with the rule catalog."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from streams.settings import REPO_ROOT

PACKAGE = REPO_ROOT / "connectors" / "sources" / "simulator"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_module_of_the_simulator_imports_streams():
    for path in sorted(PACKAGE.rglob("*.py")):
        bad = {m for m in _imports(path) if m == "streams" or m.startswith("streams.")}
        assert not bad, f"{path.name} imports {bad}"


def test_importing_the_simulator_loads_nothing_of_the_extractor():
    code = (
        "import sys; import connectors.sources.simulator, connectors.sources.simulator.fleetsim; "
        "print(sorted(m for m in sys.modules if m.startswith('streams')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    assert out.stdout.strip() == "[]"


def test_no_rule_file_is_read_by_the_simulator():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        assert "rules/" not in text and ".toml" not in text, path.name
