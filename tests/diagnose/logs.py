"""A log written for a test, then diagnosed the way ``sickbay diagnose FILE`` reads it."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from streams.diagnose.driver import Diagnoser, Diagnosis, summary

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@cache
def _diagnoser() -> Diagnoser:
    """One for the whole session: building it loads and compiles the catalog, and ``run`` keeps no
    state between files (the prefilter's memo of literal sets is the same for every run)."""
    return Diagnoser()


def diagnosed(tmp_path: Path, lines: list[str], name: str = "job.log") -> Diagnosis:
    """``lines`` written to ``tmp_path / name`` and diagnosed."""
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return _diagnoser().run([str(path)], NOW)


def outcome(s: dict[str, object]) -> tuple[object, ...]:
    """A ``--format json`` summary's root rule (None without one), category, restartable and what
    it isolates: the four things a rule's verdict test pins."""
    root = s["root_cause"]
    return (root["rule"] if isinstance(root, dict) else None, s["category"], s["restartable"], s["isolate"])


def verdict(tmp_path: Path, lines: list[str], name: str = "job.log") -> tuple[object, ...]:
    """``lines`` diagnosed, read as ``outcome`` reads a summary."""
    return outcome(summary(diagnosed(tmp_path, lines, name)))


def verdict_and_culprit(tmp_path: Path, lines: list[str]) -> tuple[object, ...]:
    """``verdict`` with the culprit as the summary names it, for the tests of who is to blame."""
    s = summary(diagnosed(tmp_path, lines))
    return (*outcome(s), s["culprit"])
