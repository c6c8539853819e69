"""A log written for a test, then diagnosed the way ``sickbay diagnose FILE`` reads it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from streams.diagnose.driver import Diagnoser, Diagnosis

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def diagnosed(tmp_path: Path, lines: list[str], name: str = "job.log") -> Diagnosis:
    """``lines`` written to ``tmp_path / name`` and diagnosed."""
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return Diagnoser().run([str(path)], NOW)
