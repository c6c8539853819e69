"""What machine a benchmark ran on, for the RESULTS.md rows."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def describe() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB, {platform.system()} {platform.release()}"


def today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def append_row(section: str, header: str, row: str) -> None:
    """Append ``row`` under ``## section`` (created with ``header`` the first time)."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    marker = f"## {section}\n"
    if marker not in text:
        text = text.rstrip("\n") + f"\n\n{marker}\n{header}\n"
    head, _, tail = text.partition(marker)
    body, sep, rest = tail.partition("\n## ")
    body = body.rstrip("\n") + f"\n{row}\n"
    RESULTS.write_text(head + marker + body + (sep + rest if sep else ""))
