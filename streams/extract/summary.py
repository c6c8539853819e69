"""A signal's one-line summary from its rule's template.

Templates are ``str.format`` strings over the rule's named groups (plus ``gpu``, ``rank``,
``job_id``, ``node``). A part in square brackets is optional: it is dropped when a field inside it
did not match, so ``"NCCL watchdog timeout on rank {rank}[ (SeqNum {seq})]"`` reads well for a line
that gives no sequence number. Outside brackets a missing field still prints ``?``, which marks a
template that should have bracketed it (the catalog test finds those on the rules' own examples).

Why here and not in the extractor: the streaming stage renders tens of thousands of summaries a
second, so a template is parsed once (cached) and templates without brackets keep the plain
``format_map`` path.
"""

from __future__ import annotations

import re
from functools import lru_cache
from string import Formatter
from typing import Any

import hostlist

_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")


class Fields(dict[str, Any]):
    """Template values: lists print as a hostlist, missing names as ``?`` (and are remembered). A name
    given as None (a ``gpu`` the line did not name) is missing too: never ``on GPU None``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.missing: list[str] = []

    def __missing__(self, key: str) -> str:
        self.missing.append(key)
        return "?"

    def __getitem__(self, key: str) -> Any:
        value = super().__getitem__(key)
        if value is None:
            self.missing.append(key)
            return "?"
        if isinstance(value, list):
            return hostlist.collect_hostlist([str(v) for v in value])
        return value

    def present(self, key: str) -> bool:
        return dict.get(self, key) is not None


@lru_cache(maxsize=4096)
def _parts(template: str) -> tuple[tuple[str, tuple[str, ...], bool], ...]:
    """The template cut into (text, field names, optional) pieces, in order."""
    pieces: list[tuple[str, tuple[str, ...], bool]] = []
    at = 0
    for m in _OPTIONAL.finditer(template):
        if m.start() > at:
            pieces.append((template[at : m.start()], (), False))
        inner = m.group(1)
        names = tuple(name for _, name, _, _ in Formatter().parse(inner) if name)
        pieces.append((inner, names, True))
        at = m.end()
    if at < len(template):
        pieces.append((template[at:], (), False))
    return tuple(pieces)


def render(template: str, fields: Fields) -> str:
    """The summary: optional parts whose fields all matched, then everything else."""
    if "[" not in template:
        return template.format_map(fields)
    out: list[str] = []
    for text, names, optional in _parts(template):
        if optional and not all(fields.present(n) for n in names):
            continue
        out.append(text.format_map(fields))
    return "".join(out)


def check(template: str) -> str:
    """``template``, refused when the renderer would misread it: unbalanced or nested brackets, bad
    braces (a pydantic validator of the rule files)."""
    depth = 0
    for ch in template:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested [optional] parts in summary {template!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ] in summary {template!r}")
    if depth:
        raise ValueError(f"unbalanced [ in summary {template!r}")
    list(Formatter().parse(template))  # raises ValueError on unbalanced braces
    return template
