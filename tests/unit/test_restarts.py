"""Has restarting helped? The history a job's topology carries from attempt to attempt (restarts.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from schemas.incidents import Category, Incident
from streams.correlate.correlator import Timing, add_signal, apply_topology, decide_now
from streams.correlate.restarts import remember_failure, saw_checkpoint, with_history
from streams.correlate.state import JobTopology
from tests.factories import T0, cuda_error, kernel_xid, one, slurmctld_allocate, slurmctld_line

TIMING = Timing(root_grace_s=20, quiet_s=120, refine_interval_s=1)
T1 = T0 + timedelta(minutes=30)


def _attempt(topo: JobTopology | None, at: datetime, nodes: str) -> JobTopology:
    topo, _ = apply_topology(topo, one(slurmctld_allocate("42", nodes, at)), "c1")
    return topo


def _incident(topo: JobTopology, raw: bytes, offset: int) -> Incident:
    sig = one(raw, offset=offset)
    if sig.job_id is None:
        sig = sig.model_copy(update={"job_id": "42", "routed": True})
    window = add_signal(None, topo, sig, "c1", T1 + timedelta(hours=1))
    assert window is not None
    _, incident = decide_now(window, topo, T1 + timedelta(hours=1), TIMING)
    assert incident is not None
    return incident


def _first_attempt_crashed() -> JobTopology:
    topo = _attempt(None, T0, "gpu-[01-02]")
    crash = _incident(topo, cuda_error("gpu-01", "42", T0 + timedelta(minutes=5)), 1)
    assert crash.restartable is True  # on its own, a crash may be a one-off
    return remember_failure(topo, crash)


def test_a_new_attempt_keeps_the_roots_of_the_earlier_ones():
    topo = _first_attempt_crashed()
    topo, _ = apply_topology(topo, one(slurmctld_line("Requeuing JobId=42", T1 - timedelta(minutes=1))), "c1")
    topo = _attempt(topo, T1, "gpu-[03-04]")
    assert topo.attempt == 2
    assert [(f.attempt, f.root.rule, f.root.node) for f in topo.failures] == [(1, "cuda.error", "gpu-01")]


def test_the_same_crash_ending_the_next_attempt_is_not_restartable_and_shows_the_first():
    topo = _attempt(_first_attempt_crashed(), T1, "gpu-[03-04]")
    again = _incident(topo, cuda_error("gpu-03", "42", T1 + timedelta(minutes=5)), 2)
    assert again.restartable is False
    assert [e.node for e in again.evidence if e.rule == "cuda.error"][:1] == ["gpu-01"]


def test_a_checkpoint_saved_since_the_first_crash_means_the_restart_made_progress():
    topo = _attempt(_first_attempt_crashed(), T1, "gpu-[03-04]")
    topo = saw_checkpoint(topo, T1 + timedelta(minutes=2))
    again = _incident(topo, cuda_error("gpu-03", "42", T1 + timedelta(minutes=5)), 2)
    assert again.restartable is True


def test_a_checkpoint_from_before_the_first_crash_does_not_count():
    topo = saw_checkpoint(_first_attempt_crashed(), T0 + timedelta(minutes=1))
    topo = _attempt(topo, T1, "gpu-[03-04]")
    again = _incident(topo, cuda_error("gpu-03", "42", T1 + timedelta(minutes=5)), 2)
    assert again.restartable is False


def test_a_different_failure_on_the_next_attempt_keeps_its_own_restartability():
    topo = _attempt(_first_attempt_crashed(), T1, "gpu-[03-04]")
    other = _incident(
        topo, cuda_error("gpu-03", "42", T1 + timedelta(minutes=5), "unspecified launch failure"), 2
    )
    assert other.restartable is True


def test_a_hardware_fault_on_each_attempt_stays_restartable_elsewhere():
    topo = _attempt(None, T0, "gpu-[01-02]")
    first = _incident(topo, kernel_xid("gpu-01", 79, T0 + timedelta(minutes=5)), 1)
    topo = _attempt(remember_failure(topo, first), T1, "gpu-[03-04]")
    again = _incident(topo, kernel_xid("gpu-03", 79, T1 + timedelta(minutes=5)), 2)
    assert again.category == Category.HARDWARE_GPU
    assert again.restartable is True


def test_remembering_the_same_root_twice_changes_nothing_and_an_older_checkpoint_is_ignored():
    topo = _attempt(None, T0, "gpu-[01-02]")
    crash = _incident(topo, cuda_error("gpu-01", "42", T0 + timedelta(minutes=5)), 1)
    once = remember_failure(topo, crash)
    assert remember_failure(once, crash) is once
    saved = saw_checkpoint(once, T0 + timedelta(minutes=3))
    assert saw_checkpoint(saved, T0 + timedelta(minutes=2)) is saved


def test_no_history_leaves_the_verdict_alone():
    assert with_history(None, 2, None) is None


def test_the_same_failure_on_another_gpu_and_node_is_the_same_failure():
    from streams.correlate.restarts import failure_of

    first = failure_of(
        "gpu.xid", "Xid 31 (MMU fault) on GPU 0000:4e:00: usually the application", "n1", "0000:4e:00"
    )
    again = failure_of(
        "gpu.xid", "Xid 31 (MMU fault) on GPU 0000:db:00: usually the application", "n7", "0000:db:00"
    )
    other = failure_of(
        "gpu.xid",
        "Xid 13 (graphics engine exception) on GPU 0000:db:00: usually the application",
        "n7",
        "0000:db:00",
    )
    assert first == again
    assert other != again


def test_every_root_a_revision_named_is_remembered_for_its_attempt():
    topo = _attempt(None, T0, "gpu-[01-02]")
    crash = _incident(topo, cuda_error("gpu-01", "42", T0 + timedelta(minutes=5)), 1)
    xid = _incident(topo, kernel_xid("gpu-01", 79, T0 + timedelta(minutes=5)), 2)
    both = remember_failure(remember_failure(topo, crash), xid)
    assert sorted(f.root.rule for f in both.failures) == ["cuda.error", "gpu.xid"]
