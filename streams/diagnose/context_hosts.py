"""Hosts a log names in its own context lines, for the lines after them that name none.

A log pasted into a ticket, or saved from a terminal, often says where it ran only once: the shell
prompt before the command (``[root@node045 ~]# ibstatus``, ``alice@gpu-07:~/run$ python train.py``),
a report's header (``Node:  c016``, ``NodeName=c016 Arch=x86_64 ...`` from ``scontrol show node``)
or ``uname -a``'s line (``Linux gpu-07 5.15.0-91-generic ... x86_64 GNU/Linux``). The kernel or
CUDA lines that follow carry no host of their own, so without this the verdict names no culprit
even though the log says which machine it was.

Only what the line says plainly counts. A prompt whose command runs or reports on other machines
(``srun``, ``ssh``, ``kubectl``, ``scontrol`` ...) ends the context: what follows is not that
host's. A host seen only later in the file names nothing earlier (a prompt comes before the output
it explains). Header fields are read in a file's first megabyte only, prompts anywhere.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

# ``[user@host dir]#`` (Red Hat's bash), ``user@host:dir$`` (Debian's), ``user@host dir %`` (zsh),
# behind an optional ``(venv)`` or ``(base)``; the command after it is group 3.
_PROMPT = re.compile(
    rb"[ \t]*(?:\([\w.-]+\)[ \t]+)?\[?([a-z_][\w.-]{0,31})@([A-Za-z0-9][A-Za-z0-9.-]{0,252})"
    rb"(?::[^\s#$%]*|[ \t]+[^\n\]#$%]{0,128}\]?)[ \t]*[#$%][ \t]?([^\n]*)"
)
# ``Node: c016`` (a report's header), ``NodeName=c016 Arch=...`` (scontrol show node), ``Hostname:``.
_NODE_FIELD = re.compile(
    rb"[ \t]*(?:Node|NodeName|Node name|Hostname|Host name)[ \t]*[:=][ \t]*"
    rb"([A-Za-z0-9][A-Za-z0-9.-]{0,252})(?=[ \t\r]|$)",
    re.IGNORECASE,
)
# ``uname -a`` (or ``-nm``): ``Linux <host> <release> ... x86_64``, the release starting with a
# digit; the kernel's boot banner ``Linux version 5.15.0 ...`` names no host.
_UNAME = re.compile(
    rb"[ \t]*Linux[ \t]+([A-Za-z0-9][A-Za-z0-9.-]{0,252})[ \t]+(?:\d[^\n]*[ \t])?"
    rb"(?:x86_64|aarch64|arm64|ppc64le|s390x)(?=[ \t\r]|$)"
)
# Found with bytes.find: a prompt's ``@`` within its line's first bytes; a field's name first in its line.
_PROMPT_KEY, _PROMPT_REACH = b"@", 64
_FIELD_KEYS = (b"Node", b"node", b"NODE", b"Host", b"host", b"HOST", b"Linux")

# Commands whose output is about, or comes from, other machines.
_REMOTE = frozenset(
    b"ssh srun sbatch salloc sacct squeue sinfo scontrol sstat mpirun mpiexec pdsh clush ansible "
    b"kubectl oc helm ray deepspeed pssh parallel-ssh".split()
)
_NOT_A_HOST = frozenset({b"localhost", b"localhost.localdomain", b"version"})


def _command(text: bytes) -> bytes:
    """The program a prompt's command line runs (``sudo`` and ``env`` aside)."""
    words = text.split()
    while words and (words[0] in (b"sudo", b"env", b"time", b"nohup") or b"=" in words[0]):
        words = words[1:]
    return words[0].rsplit(b"/", 1)[-1] if words else b""


def _host_of(line: bytes) -> tuple[bool, str | None]:
    """Whether ``line`` is a context line, and the host it puts in context (None: it ends one)."""
    if (m := _PROMPT.match(line)) is not None:
        host = m.group(2).rstrip(b".")
        if host in _NOT_A_HOST or _command(m.group(3)) in _REMOTE:
            return True, None
        return True, host.decode("ascii")
    if (m := _NODE_FIELD.match(line)) is not None and m.group(1) not in _NOT_A_HOST:
        host = m.group(1).decode("ascii")
        # ``Node: 0`` is a NUMA node or a GPU index, not a machine
        return (True, host) if any(c.isalpha() for c in host) else (False, None)
    if (m := _UNAME.match(line)) is not None and m.group(1) not in _NOT_A_HOST:
        return True, m.group(1).decode("ascii")
    return False, None


@dataclass
class ContextHosts:
    """Per source: the numbers of its context lines (sorted) and the host each put in context."""

    lines: dict[str, list[int]] = field(default_factory=dict)
    hosts: dict[str, list[str | None]] = field(default_factory=dict)

    def scan(self, source: str, first: int, data: bytes) -> None:
        """Reads the context lines of one chunk (whole lines of ``source``, the first numbered
        ``first``, from 1). Each key is found with ``bytes.find`` and only lines holding it near
        their start are matched: most lines of a large log hold none."""
        found: set[int] = set()  # the starts of lines worth matching
        # A report's header is at its top: field names are looked for in a source's first chunk
        # only (a search for a name of several bytes over a large log cost a fifth of diagnose's
        # time; the prompt's one byte is found about ten times faster).
        keys = (_PROMPT_KEY, *_FIELD_KEYS) if first == 1 else (_PROMPT_KEY,)
        for key in keys:
            i = data.find(key)
            while i >= 0:
                start = data.rfind(b"\n", 0, i) + 1
                if key == _PROMPT_KEY:
                    if i - start <= _PROMPT_REACH:
                        found.add(start)
                elif not data[start:i].strip(b" \t"):
                    found.add(start)
                end = data.find(b"\n", i)
                i = data.find(key, end) if end >= 0 else -1
        if not found:
            return
        numbers, hosts = self.lines.setdefault(source, []), self.hosts.setdefault(source, [])
        line, pos = first, 0
        for start in sorted(found):
            line += data.count(b"\n", pos, start)
            pos = start
            end = data.find(b"\n", start)
            is_context, host = _host_of(data[start : end if end >= 0 else len(data)].rstrip(b"\r"))
            if is_context:
                numbers.append(line)
                hosts.append(host)

    def host_at(self, source: str, line: int) -> str | None:
        """The host in context at ``line`` of ``source``: the last context line's at or before it."""
        numbers = self.lines.get(source)
        if not numbers:
            return None
        k = bisect.bisect_right(numbers, line)
        return self.hosts[source][k - 1] if k else None
