"""The one JSON seam: every byte sickbay writes or reads as JSON passes here.

orjson is used for speed and because it encodes datetimes, enums and UUIDs
natively; pydantic models are dumped to plain Python first.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel

_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS


def _default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(by_alias=True)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


def dumps(obj: Any) -> bytes:
    """Encode a model, dict or list as compact UTF-8 JSON."""
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(by_alias=True)
    return orjson.dumps(obj, default=_default, option=_OPTIONS)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Decode JSON; raises ``orjson.JSONDecodeError`` (a ``ValueError``) on bad input."""
    return orjson.loads(data)


JSONDecodeError = orjson.JSONDecodeError
