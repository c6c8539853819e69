"""The worker's processes freeze their start-up objects out of later collections (streams/app.py
``tune_the_gc``). Run in a fresh interpreter: the collector's state is process-wide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = """
import gc, json
from streams.app import tune_the_gc
before = (gc.get_threshold(), gc.get_freeze_count())
tune_the_gc()
print(json.dumps({"before": before, "after": (gc.get_threshold(), gc.get_freeze_count())}))
"""


def test_a_worker_process_freezes_what_start_up_built_and_keeps_cpythons_thresholds():
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    (thresholds, frozen_before), (thresholds_after, frozen_after) = got["before"], got["after"]
    assert frozen_before == 0
    assert frozen_after > 10_000  # modules, classes, schemas: out of every later full collection
    assert thresholds_after == thresholds
