"""Text output for a person at 3 a.m.: the verdict first, then why, then the evidence."""

from __future__ import annotations

from typing import Any

import typer

from streams.diagnose.driver import Diagnosis, summary
from streams.diagnose.reader import ReadReport

_CATEGORY_COLOUR = {
    "hardware_gpu": typer.colors.RED,
    "hardware_network": typer.colors.RED,
    "hardware_host": typer.colors.RED,
    "system_software": typer.colors.MAGENTA,
    "infrastructure": typer.colors.YELLOW,
    "application": typer.colors.CYAN,
    "unknown": typer.colors.WHITE,
}


def render_text(d: Diagnosis, colour: bool) -> str:
    s: dict[str, Any] = summary(d)

    def style(text: str, **kw: Any) -> str:
        return typer.style(text, **kw) if colour else text

    out: list[str] = []
    category = str(s["category"])
    out.append(
        style(f"{category.upper()}", fg=_CATEGORY_COLOUR.get(category), bold=True)
        + f"  confidence {s['confidence']:.2f}"
    )
    root = s["root_cause"]
    if root is None:
        out.append("No failure signature found in the input.")
    else:
        out.append(style("root cause  ", bold=True) + f"{root['summary']}")
        out.append(f"            {root['source']}:{root['line']}")
        out.append(f"            {root['text'][:300]}")
    out.append(style("culprit     ", bold=True) + str(s["culprit"] or "-"))
    out.append(
        style("restart     ", bold=True)
        + (
            "yes" + (f", without {', '.join(s['isolate'])}" if s["isolate"] else "")
            if s["restartable"]
            else "no: a rerun would fail the same way until something is changed"
        )
    )
    out.append(style("isolate     ", bold=True) + (", ".join(s["isolate"]) or "nothing"))
    for sym in s["supporting"]:
        where = f" on {', '.join(sym['nodes'])}" if sym["nodes"] else ""
        ranks = f" (ranks {', '.join(map(str, sym['ranks']))})" if sym["ranks"] else ""
        out.append(style("supporting  ", bold=True) + f"{sym['count']} x {sym['summary']}{where}{ranks}")
    out.append(style("coverage    ", bold=True) + (", ".join(s["coverage"]) or "no signal"))
    if s["evidence"]:
        out.append(style("evidence", bold=True))
        for e in s["evidence"]:
            out.append(f"  {e['source']}:{e['line']}  {e['text'][:200]}")
    r = d.report
    out.append(
        style(
            f"read {r.files} file(s), {r.lines} lines, {r.bytes / 1e6:.1f} MB; {len(d.signals)} signals",
            dim=True,
        )
    )
    skipped = skipped_lines(r)
    if skipped:
        out.append(style("skipped " + ", ".join(skipped), fg=typer.colors.YELLOW))
    out.extend(style(f"warning: {p}", fg=typer.colors.YELLOW) for p in r.problems)
    return "\n".join(out)


def skipped_lines(r: ReadReport) -> list[str]:
    """What reading left out, in the words both output formats use ("2 binary lines")."""
    skipped = []
    if r.skipped_long:
        skipped.append(f"{r.skipped_long} lines over 1 MiB")
    if r.skipped_binary:
        skipped.append(f"{r.skipped_binary} binary lines")
    return skipped
