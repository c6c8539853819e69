"""What the tools that carry a log line add to it, taken off again before the rules read it.

A program writes ``  exitcode  : 1 (pid: 4242)`` or ``/dev/sda2  440G  417G  0 100% /``; by the
time an operator hands the line to sickbay a tool may have put something in front of it or inside
it:

- terminal colours (ANSI escape sequences) from a logger that saw a TTY, or a ``script``/tmux
  capture: ``\\x1b[31mRuntimeError\\x1b[0m: CUDA error`` hides the word boundary a rule wants, and a
  colour code in the middle of a phrase splits the literal the prefilter looks for;
- ``kubectl logs --timestamps`` (and GitHub Actions' log view): ``2024-05-01T10:00:01.123456789Z``,
  and ``kubectl logs --prefix``: ``[pod/trainer-worker-0/pytorch] ``;
- ``docker compose logs``: the service column, ``trainer-1  | ``;
- Ray's driver, for the output of its workers: ``(RayTrainWorker pid=2041, ip=10.0.0.3) ``;
- ``pdsh``/``clush`` run across nodes: ``gpu17: `` (the one prefix that says something: the node);
- ``srun --label``: the task number, ``3: ``.

Most rules search anywhere in a line and never notice a prefix. Rules anchored at the start of the
line (a torchelastic failure block's ``exitcode :``, ``df`` and ``nvidia-smi -q`` output, JSON
progress records) do: the extractor tries those once more on the line without its carrier prefix
(:func:`uncarried`). Colours are always taken off (:func:`strip_colours`), and ``sickbay diagnose``
reads CRLF line ends as LF (:func:`clean_chunk`) so a hard-wrapped paste from a Windows editor is
joined like any other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# CSI (colours, cursor moves: ESC [ params final), OSC (titles, links: ESC ] ... BEL or ESC \) and
# the two-byte escapes (ESC followed by one of @-Z \ ] ^ _).
_COLOURS = r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\^_]"
_COLOURS_STR = re.compile(_COLOURS)
_COLOURS_BYTES = re.compile(_COLOURS.encode())

# One carrier prefix at the start of a line; several may stack (a kubectl timestamp before a
# compose column). ``host``: pdsh/clush's node name (DeepSpeed's multi-node launcher runs pdsh too),
# which must hold a digit (node names do; an exception's ``RuntimeError:`` does not), start with a
# letter and be a DNS name (``sm_80:``, ``local_rank0:`` are not).
_PREFIX = re.compile(
    r"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) "  # kubectl --timestamps
    r"|[\w.-]+\s+\| "  # docker compose's service column
    r"|\[pod/[\w.-]+/[\w.-]+\] "  # kubectl logs --prefix
    r"|\((?:[\w.:-]+ )?pid=\d+(?:, ip=[\w.:-]+)?\) "  # Ray: (RayTrainWorker pid=7, ip=10.0.0.3)
    r"|\s*\d+: "  # srun --label
    r"|(?P<host>[A-Za-z][A-Za-z0-9-]*\d[A-Za-z0-9.-]*): )"  # pdsh / clush: a DNS name, no "_"
)
# Words with a number that are not nodes: "rank3: ...", "GPU0: ...", "epoch12: ..." (a lower-case
# "gpu17" is a node name on many clusters). A host holds no "_" (``_PREFIX``), so "local_rank0" never
# gets this far. Programs that put their own name first and have a digit in it are not nodes
# either: "python3: can't open file ...", "pip3: ...", enroot's helpers ("enroot-aufs2ovlfs: failed
# to set capabilities", SemiAnalysisAI/InferenceX#1467).
_NOT_A_HOST = re.compile(
    r"GPU\d+|(?i:(?:rank|cuda|dev|device|task|proc|pid|tid|thread|step|epoch|iter"
    r"|iteration|layer|stage|batch|shard|line|col|error|warn|warning|info|debug)-?\d+)"
    r"|python[\d.]*|pip\d[\d.]*|enroot-[a-z0-9-]+"
)
MAX_PREFIXES = 3


@dataclass(frozen=True, slots=True)
class Carried:
    """A line without the prefixes tools put in front of it."""

    text: str  # the line as its program wrote it
    offset: int  # how many characters came off the front
    host: str | None  # the node a pdsh/clush prefix names


def strip_colours(text: str) -> str:
    """The text without terminal escape sequences (colours, cursor moves, titles)."""
    return _COLOURS_STR.sub("", text) if "\x1b" in text else text


def uncarried(text: str) -> Carried | None:
    """The line without its carrier prefixes (module docstring), or None when it has none."""
    offset, host = 0, None
    for _ in range(MAX_PREFIXES):
        m = _PREFIX.match(text, offset)
        if m is None or m.end() == offset:
            break
        name = m.group("host")
        if name is not None:
            if _NOT_A_HOST.fullmatch(name):
                break
            host = host or name
        offset = m.end()
    if offset == 0:
        return None
    return Carried(text=text[offset:], offset=offset, host=host)


def clean_chunk(data: bytes) -> bytes:
    """A chunk of a log file with CRLF line ends read as LF and terminal escapes taken off: the line
    count stays the same (neither holds a newline of its own). A lone CR (a progress bar redrawn in
    place) is kept."""
    if b"\r\n" in data:
        data = data.replace(b"\r\n", b"\n")
    if b"\x1b" in data:
        data = _COLOURS_BYTES.sub(b"", data)
    return data
