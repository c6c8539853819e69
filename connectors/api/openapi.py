"""Write the API's OpenAPI document: ``python -m connectors.api.openapi [PATH]`` (default docs/openapi.json).

The spec is generated from the pydantic models and routes; a test keeps the
published copy (docs/openapi.json) equal to what the code generates.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from schemas import codec

DEFAULT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def spec() -> dict[str, Any]:
    from connectors.api.app import ApiConfig, create_app
    from connectors.api.publisher import MemoryPublisher
    from connectors.api.store import Store
    from schemas.actions import Mode
    from schemas.topics import TopicCatalog

    config = ApiConfig(cluster="local", default_mode=Mode.OBSERVE, topics=TopicCatalog())
    app = create_app(Store(None, "sickbay"), MemoryPublisher(), config)  # no query runs to build the spec
    document: dict[str, Any] = app.openapi()
    return document


def render() -> str:
    import orjson

    return orjson.dumps(spec(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT
    path.write_text(render())
    print(f"wrote {path} ({len(codec.loads(path.read_bytes())['paths'])} paths)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
