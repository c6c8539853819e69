"""``sickbay diagnose`` reads a line that a terminal or a pasted log hard-wrapped as the one line it
was (the thread set's nanotron#204, jax#788): the pieces of a wrapped line are as long as the
terminal was wide, and a rule's literal runs from one piece into the next."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from streams.diagnose.driver import WRAP_MIN_WIDTH, Diagnoser

NOW = datetime(2026, 1, 1, tzinfo=UTC)
WATCHDOG = (
    "[default2]:[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=9120, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600888 "
    "milliseconds before timing out."
)


def _wrap(line: str, width: int) -> str:
    return "\n".join(line[i : i + width] for i in range(0, len(line), width))


def _rules(tmp_path: Path, text: str) -> list[tuple[str, int | None]]:
    path = tmp_path / "job.log"
    path.write_text(text + "\n")
    d = Diagnoser().run([str(path)], NOW)
    return [(s.rule, s.source.line) for s in d.signals]


def test_a_watchdog_timeout_wrapped_at_the_terminals_width_is_read_whole(tmp_path: Path):
    for width in (80, 120):
        text = "training started\n" + _wrap(WATCHDOG, width) + "\nnext line"
        assert ("nccl.watchdog_timeout", 2) in _rules(tmp_path, text), width


def test_an_unwrapped_log_reads_the_same_with_or_without_the_joining(tmp_path: Path):
    text = "training started\n" + WATCHDOG + "\n" + WATCHDOG.replace("Rank 2", "Rank 3")
    rules = _rules(tmp_path, text)
    assert rules.count(("nccl.watchdog_timeout", 2)) == 1
    assert ("nccl.watchdog_timeout", 3) in rules
    assert len(rules) == len(set(rules))


def test_short_lines_are_lines_of_their_own_not_pieces(tmp_path: Path):
    # two short lines whose joined text would hold the literal: too short to be a wrapped piece
    short = "[Rank 2] Watchdog caught "
    assert len(short) < WRAP_MIN_WIDTH
    text = (
        short
        + "\ncollective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, Timeout(ms)=1) ran for 2 milliseconds"
    )
    assert not any(rule.startswith("nccl.watchdog") for rule, _ in _rules(tmp_path, text))


def test_a_longer_next_line_is_a_line_of_its_own(tmp_path: Path):
    # a wrapped line's last piece is never longer than the pieces before it
    head, tail = WATCHDOG[:80], WATCHDOG[80:]
    assert len(tail) > len(head)
    assert not any(rule.startswith("nccl.watchdog") for rule, _ in _rules(tmp_path, head + "\n" + tail))


def test_a_wrapped_line_in_a_crlf_paste_is_joined_too(tmp_path: Path):
    # a log saved from a Windows editor or a browser's text box: CRLF line ends
    for width in (80, 120):
        text = "training started\r\n" + _wrap(WATCHDOG, width).replace("\n", "\r\n") + "\r\nnext line"
        assert ("nccl.watchdog_timeout", 2) in _rules(tmp_path, text), width
