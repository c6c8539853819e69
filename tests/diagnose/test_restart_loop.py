"""A folder with several attempts of one job: a failure that came back after restarts is not
worth another restart, unless the restarts made progress or a node was to blame."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from streams.diagnose.driver import Diagnoser

NOW = datetime(2026, 11, 30, tzinfo=UTC)
ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered"
XID79 = "gpu-{n} kernel: NVRM: Xid (PCI:0000:06:00): 79, pid=1, GPU has fallen off the bus."


def _attempts(tmp_path: Path, failure: str, *, saved_between: bool = False, attempts: int = 3) -> list[str]:
    ctld, train = [], []
    for a in range(attempts):
        minute = 10 * a
        ctld.append(
            f"[2026-11-13T21:{minute:02d}:00.000] sched: Allocate JobId=77 NodeList=gpu-0{a + 1} #CPUs=8"
        )
        if saved_between and a == 1:
            train.append(
                f"[2026-11-13T21:{minute + 3:02d}:00.000] saving checkpoint at iteration    1200 to /ckpt"
            )
            train.append(
                f"[2026-11-13T21:{minute + 4:02d}:00.000]   successfully saved checkpoint from iteration    1200 to /ckpt"
            )
        train.append(f"[2026-11-13T21:{minute + 5:02d}:00.000] " + failure.format(n=a + 1))
        ctld.append(f"[2026-11-13T21:{minute + 6:02d}:00.000] _job_complete: JobId=77 WEXITSTATUS 1")
    (tmp_path / "slurmctld.log").write_text("\n".join(ctld) + "\n")
    (tmp_path / "train.log").write_text("\n".join(train) + "\n")
    return [str(tmp_path / "slurmctld.log"), str(tmp_path / "train.log")]


def test_the_same_application_failure_ending_every_attempt_is_not_restartable(tmp_path: Path):
    verdict = Diagnoser().run(_attempts(tmp_path, ILLEGAL), NOW).verdict
    assert verdict is not None
    assert verdict.category.value == "application"
    assert verdict.restartable is False
    assert sum(1 for e in verdict.evidence if e.rule == verdict.root.rule) >= 2  # the earlier attempts


def test_one_attempt_keeps_the_rules_own_restartability(tmp_path: Path):
    verdict = Diagnoser().run(_attempts(tmp_path, ILLEGAL, attempts=1), NOW).verdict
    assert verdict is not None and verdict.restartable is True


def test_a_checkpoint_saved_between_the_failures_means_the_restarts_made_progress(tmp_path: Path):
    verdict = Diagnoser().run(_attempts(tmp_path, ILLEGAL, saved_between=True), NOW).verdict
    assert verdict is not None and verdict.restartable is True


def test_a_hardware_fault_on_another_node_each_attempt_stays_restartable(tmp_path: Path):
    verdict = Diagnoser().run(_attempts(tmp_path, XID79), NOW).verdict
    assert verdict is not None
    assert verdict.category.value == "hardware_gpu"
    assert verdict.restartable is True
