"""Slurm name grammar, checked before any command is built.

Every value an action carries ends up as an argument of ``scontrol``/``scancel``
(locally, or through a remote login shell in SSH mode) or in a slurmrestd URL.
Quoting makes a hostile value harmless to a shell, but not to the command it
reaches: ``-h`` is an option, ``gpu-01 State=RESUME`` would be a second
``scontrol`` keyword, ``../jobs`` changes a REST path. So values are checked
against what Slurm itself accepts and anything else is refused with a reason.
"""

from __future__ import annotations

import re

import hostlist

# NodeName: a hostname label (letters, digits, '-', '_', '.'), starting with a letter or digit.
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# A hostlist expression: names, bracketed ranges/lists of numbers, commas between.
_HOSTLIST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-\[\],]{0,1023}")
# Job id: plain (4711), array task (4711_3), heterogeneous component (4711+0).
_JOB = re.compile(r"[0-9]{1,10}(?:_[0-9]{1,10}|\+[0-9]{1,4})?")
# Control characters would end a log line or a scontrol record ("Reason=" is free text otherwise).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_HOSTLIST_NODES = 4096


class InvalidName(ValueError):
    """A value that is not a valid Slurm node name, hostlist, job id or reason."""


def node_name(value: str) -> str:
    if not _NODE.fullmatch(value):
        raise InvalidName(f"invalid Slurm node name {value!r}: expected letters, digits, '-', '_' or '.'")
    return value


def node_names(values: list[str]) -> list[str]:
    """Names or hostlist expressions (``gpu-[01-04],cpu-7``) expanded to single, checked node names."""
    out: list[str] = []
    for value in values:
        if not _HOSTLIST.fullmatch(value):
            raise InvalidName(f"invalid Slurm hostlist {value!r}")
        try:
            expanded = hostlist.expand_hostlist(value)
        except hostlist.BadHostlist as exc:
            raise InvalidName(f"invalid Slurm hostlist {value!r}: {exc}") from exc
        if len(out) + len(expanded) > MAX_HOSTLIST_NODES:
            raise InvalidName(f"hostlist {value!r} names more than {MAX_HOSTLIST_NODES} nodes")
        out.extend(node_name(n) for n in expanded)
    return sorted(set(out))


def job_id(value: str) -> str:
    if not _JOB.fullmatch(value):
        raise InvalidName(
            f"invalid Slurm job id {value!r}: expected 4711, an array task 4711_3 or a het component 4711+0"
        )
    return value


def reason(value: str) -> str:
    if not value.strip():
        raise InvalidName("empty reason")
    if _CONTROL.search(value):
        raise InvalidName(f"reason contains control characters: {value!r}")
    return value
