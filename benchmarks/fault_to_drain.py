"""Fault-to-drain: time from the injected Xid line to the node drained on real Slurm.

Runs ``sickbay demo`` (act mode) N times on this machine, each with fresh topics
and a fresh Faust app, and records every run and the median in RESULTS.md. The
last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from benchmarks.machine import append_row, describe, today
from schemas import codec
from streams.settings import REPO_ROOT


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    times: list[float] = []
    for i in range(args.runs):
        proc = subprocess.run(
            [sys.executable, "-m", "streams.cli.main", "demo"],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            timeout=600,
            check=False,
        )
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
        summary = codec.loads(last) if last.startswith("{") else {}
        if proc.returncode != 0 or summary.get("demo") != "ok":
            print(proc.stdout[-4000:], proc.stderr[-2000:], file=sys.stderr)
            print(codec.dumps({"error": f"demo run {i + 1} failed", "rc": proc.returncode}).decode())
            return 1
        times.append(float(summary["fault_to_drain_s"]))
        print(f"run {i + 1}: fault → drain {times[-1]:.3f} s", file=sys.stderr)
    median = statistics.median(times)
    append_row(
        "Fault to drain (`make bench`, walking skeleton demo)",
        "| date | machine | runs | median s | min s | max s | all runs s |\n|---|---|---|---|---|---|---|",
        f"| {today()} | {describe()} | {len(times)} | {median:.3f} | {min(times):.3f} | {max(times):.3f} | "
        f"{', '.join(f'{t:.3f}' for t in times)} |",
    )
    print(codec.dumps({"fault_to_drain_s_median": round(median, 3), "runs": len(times)}).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
