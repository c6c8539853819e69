from __future__ import annotations

from datetime import timedelta

from schemas.incidents import Category, IncidentStatus
from schemas.signals import Signal
from schemas.telemetry import GpuTelemetry
from streams.correlate import straggler
from streams.correlate.correlator import Timing, add_signal, apply_topology, decide_now, incident_id, tick
from tests.factories import T0, cuda_error, kernel_xid, nccl_timeout, one, slurmctld_allocate, slurmctld_line

TIMING = Timing(root_grace_s=20, quiet_s=120, refine_interval_s=1)
NOW = T0 + timedelta(hours=1)


def _topology():
    topo, assignments = apply_topology(None, one(slurmctld_allocate("42", "gpu-[01-04]", T0)), "c1")
    return topo, assignments


def _feed(window, topo, raw, now, offset):
    sig = one(raw, offset=offset)
    if sig.job_id is None:
        sig = sig.model_copy(update={"job_id": "42", "routed": True})
    window = add_signal(window, topo, sig, "c1", now)
    return decide_now(window, topo, now, TIMING)


def test_allocation_publishes_one_assignment_per_node_for_attempt_one():
    topo, assignments = _topology()
    assert topo.attempt == 1
    assert [a.node for a in assignments] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    assert {a.state for a in assignments} == {"assigned"}


def test_xid79_with_nccl_timeouts_elsewhere_is_one_hardware_incident_blaming_that_node():
    topo, _ = _topology()
    window, incident = None, None
    emitted = []
    for i, (node, rank) in enumerate([("gpu-01", 0), ("gpu-02", 1), ("gpu-04", 3)]):
        window, inc = _feed(window, topo, nccl_timeout(node, rank, "42", T0 + timedelta(minutes=10)), NOW, i)
        assert inc is None  # cascades alone wait for a root
    window, incident = _feed(window, topo, kernel_xid("gpu-03", 79, T0 + timedelta(minutes=1)), NOW, 10)
    emitted.append(incident)
    assert incident is not None
    assert incident.revision == 1
    assert incident.category == Category.HARDWARE_GPU
    assert incident.culprit is not None and incident.culprit.node == "gpu-03"
    assert incident.isolate == ["gpu-03"]
    assert incident.root_cause.code == 79
    [symptom] = incident.supporting
    assert symptom.rule == "nccl.watchdog_timeout"
    assert (symptom.count, symptom.nodes, symptom.ranks) == (3, ["gpu-01", "gpu-02", "gpu-04"], [0, 1, 3])
    assert incident.confidence >= 0.9
    assert set(incident.coverage) == {"kernel", "training", "scheduler"}
    assert incident.job_nodes == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]


def test_late_cascade_evidence_is_a_refined_revision_of_the_same_incident_on_the_next_tick():
    topo, _ = _topology()
    window, first = _feed(None, topo, kernel_xid("gpu-03", 79, T0 + timedelta(minutes=1)), NOW, 1)
    window, none = _feed(window, topo, nccl_timeout("gpu-01", 0, "42", T0 + timedelta(minutes=11)), NOW, 2)
    assert none is None  # same culprit: coalesced
    window, refined = tick(window, topo, NOW + timedelta(seconds=1), TIMING)
    assert refined is not None
    assert refined.incident_id == first.incident_id
    assert refined.revision == 2
    assert refined.supporting[0].count == 1
    window, nothing = tick(window, topo, NOW + timedelta(seconds=2), TIMING)
    assert nothing is None


def test_a_replayed_record_changes_nothing():
    topo, _ = _topology()
    window, _ = _feed(None, topo, kernel_xid("gpu-03", 79, T0), NOW, 1)
    window2, again = _feed(window, topo, kernel_xid("gpu-03", 79, T0), NOW, 1)
    assert again is None
    assert window2.seen_ids == window.seen_ids


def test_cascade_only_waits_the_root_grace_then_emits_unknown_without_a_culprit():
    topo, _ = _topology()
    window, inc = _feed(None, topo, nccl_timeout("gpu-01", 0, "42", T0), NOW, 1)
    assert inc is None
    window, inc = tick(window, topo, NOW + timedelta(seconds=5), TIMING)
    assert inc is None
    window, inc = tick(window, topo, NOW + timedelta(seconds=21), TIMING)
    assert inc is not None
    assert inc.category == Category.UNKNOWN
    assert inc.culprit is None
    assert inc.isolate == []
    assert inc.confidence < 0.5


def test_a_later_root_replaces_a_cascade_only_verdict_at_once_under_the_same_incident_id():
    topo, _ = _topology()
    window, _ = _feed(None, topo, nccl_timeout("gpu-01", 0, "42", T0 + timedelta(minutes=10)), NOW, 1)
    window, unknown = tick(window, topo, NOW + timedelta(seconds=30), TIMING)
    window, hw = _feed(window, topo, kernel_xid("gpu-03", 79, T0), NOW + timedelta(seconds=31), 2)
    assert hw is not None and unknown is not None
    assert hw.incident_id == unknown.incident_id
    assert (hw.revision, hw.category, hw.culprit.node) == (2, Category.HARDWARE_GPU, "gpu-03")


def test_decisive_hardware_beats_an_earlier_application_error_on_another_node():
    topo, _ = _topology()
    window, app_inc = _feed(None, topo, cuda_error("gpu-02", "42", T0), NOW, 1)
    assert app_inc is not None and app_inc.category == Category.APPLICATION
    window, hw = _feed(window, topo, kernel_xid("gpu-03", 79, T0 + timedelta(seconds=3)), NOW, 2)
    assert hw is not None and hw.culprit.node == "gpu-03"
    assert [s.rule for s in hw.supporting] == ["cuda.error"]


def test_quiet_period_closes_the_incident_with_a_final_revision():
    topo, _ = _topology()
    window, _ = _feed(None, topo, kernel_xid("gpu-03", 79, T0), NOW, 1)
    window, final = tick(window, topo, NOW + timedelta(seconds=121), TIMING)
    assert final is not None
    assert (final.status, final.revision) == (IncidentStatus.CLOSED, 2)
    assert window.closed


def test_job_end_closes_the_window_after_the_root_grace():
    topo, _ = _topology()
    window, _ = _feed(None, topo, kernel_xid("gpu-03", 79, T0), NOW, 1)
    topo, released = apply_topology(
        topo, one(slurmctld_line("_job_complete: JobId=42 WEXITSTATUS 1", T0)), "c1"
    )
    assert {a.state for a in released} == {"released"}
    window, closed = tick(window, topo, NOW + timedelta(seconds=21), TIMING)
    assert closed is not None and closed.status == IncidentStatus.CLOSED


def test_requeue_then_new_allocation_is_attempt_two():
    topo, _ = _topology()
    topo, _ = apply_topology(topo, one(slurmctld_line("Requeuing JobId=42", T0 + timedelta(minutes=2))), "c1")
    topo, assignments = apply_topology(
        topo, one(slurmctld_allocate("42", "gpu-[01-02,04]", T0 + timedelta(minutes=5))), "c1"
    )
    assert topo.attempt == 2
    assert [a.node for a in assignments] == ["gpu-01", "gpu-02", "gpu-04"]


def test_incident_id_is_deterministic():
    assert incident_id("c", "1", 1, "s") == incident_id("c", "1", 1, "s")
    assert incident_id("c", "1", 1, "s") != incident_id("c", "1", 2, "s")


XID13 = "Graphics SM Warp Exception on (GPC 3, TPC 5, SM 0): Out Of Range Address"


def _xid13(at, offset_s=0, pid="pid='415040', name='dcgmproftester12', "):
    return kernel_xid("gpu-03", 13, at + timedelta(seconds=offset_s), pci="0000:47:00", text=pid + XID13)


def test_a_lone_application_xid_while_training_goes_on_is_no_incident_and_closes_quietly():
    topo, _ = _topology()
    window, incident = _feed(None, topo, _xid13(T0), NOW, 1)
    assert incident is None and not window.closed
    window, incident = tick(window, topo, NOW + timedelta(seconds=30), TIMING)
    assert incident is None and not window.closed  # still waiting for the job to say something
    window, incident = tick(window, topo, NOW + timedelta(seconds=121), TIMING)
    assert incident is None and window.closed


def test_an_application_xid_followed_by_the_jobs_cuda_error_is_an_application_incident():
    topo, _ = _topology()
    window, _ = _feed(None, topo, _xid13(T0, pid=""), NOW, 1)
    window, incident = _feed(window, topo, cuda_error("gpu-03", "42", T0 + timedelta(seconds=1)), NOW, 2)
    assert incident is not None and incident.category == Category.APPLICATION


def test_an_application_xid_and_a_job_that_then_fails_is_an_incident_at_the_end():
    topo, _ = _topology()
    window, _ = _feed(None, topo, _xid13(T0, pid=""), NOW, 1)
    topo, _ = apply_topology(topo, one(slurmctld_line("_job_complete: JobId=42 WTERMSIG 6", T0)), "c1")
    window, incident = tick(window, topo, NOW + timedelta(seconds=21), TIMING)
    assert incident is not None and incident.root_cause.code == 13


def test_an_application_xid_repeated_on_one_gpu_is_a_hardware_incident_at_once():
    topo, _ = _topology()
    window = None
    for i in range(3):
        window, incident = _feed(window, topo, _xid13(T0, offset_s=i), NOW, 1 + i)
    assert incident is not None and incident.category == Category.HARDWARE_GPU


PROVISIONAL = Timing(root_grace_s=20, quiet_s=120, refine_interval_s=1, provisional_after_s=0.5)


def test_cascade_only_verdict_is_published_provisional_once_the_window_settles():
    topo, _ = _topology()
    sig = one(nccl_timeout("gpu-01", 0, "42", T0), offset=1).model_copy(update={"job_id": "42"})
    window = add_signal(None, topo, sig, "c1", NOW)
    window, early = decide_now(window, topo, NOW, PROVISIONAL)
    assert early is None  # the burst of the other ranks' timeouts is still arriving
    window, inc = tick(window, topo, NOW + timedelta(seconds=1), PROVISIONAL)
    assert inc is not None and inc.provisional
    assert (inc.revision, inc.category, inc.status) == (1, Category.UNKNOWN, IncidentStatus.OPEN)
    window, same = tick(window, topo, NOW + timedelta(seconds=2), PROVISIONAL)
    assert same is None  # nothing changed: no new provisional revision
    window, final = tick(window, topo, NOW + timedelta(seconds=21), PROVISIONAL)
    assert final is not None and not final.provisional
    assert (final.incident_id, final.revision) == (inc.incident_id, 2)
    window, nothing = tick(window, topo, NOW + timedelta(seconds=22), PROVISIONAL)
    assert nothing is None


def test_a_root_inside_the_grace_makes_the_next_revision_final_at_once():
    topo, _ = _topology()
    sig = one(nccl_timeout("gpu-01", 0, "42", T0 + timedelta(minutes=10)), offset=1)
    window = add_signal(None, topo, sig.model_copy(update={"job_id": "42"}), "c1", NOW)
    window, provisional = tick(window, topo, NOW + timedelta(seconds=1), PROVISIONAL)
    assert provisional is not None and provisional.provisional
    xid = one(kernel_xid("gpu-03", 79, T0), offset=2).model_copy(update={"job_id": "42", "routed": True})
    window = add_signal(window, topo, xid, "c1", NOW + timedelta(seconds=3))
    window, final = decide_now(window, topo, NOW + timedelta(seconds=3), PROVISIONAL)
    assert final is not None and not final.provisional
    assert (final.revision, final.category, final.culprit.node) == (2, Category.HARDWARE_GPU, "gpu-03")


def test_without_provisional_after_a_cascade_only_window_stays_silent_through_the_grace():
    topo, _ = _topology()
    window, inc = _feed(None, topo, nccl_timeout("gpu-01", 0, "42", T0), NOW, 1)
    for second in (1, 5, 19):
        window, inc = tick(window, topo, NOW + timedelta(seconds=second), TIMING)
        assert inc is None


def test_timeouts_of_survivors_after_a_requeue_refine_the_node_failure_incident_not_open_another():
    """A node dies, Slurm requeues the job; ranks it did not kill time out on the dead node's
    collective half an hour later. No new attempt has started, so they are the ended attempt's."""
    topo, _ = _topology()
    window, first = _feed(None, topo, kernel_xid("gpu-03", 79, T0 + timedelta(minutes=1)), NOW, 1)
    topo, _ = apply_topology(
        topo,
        one(slurmctld_line("Requeuing JobId=42", T0 + timedelta(minutes=2))),
        "c1",
    )
    window, closed = tick(window, topo, NOW + timedelta(seconds=25), TIMING)
    assert window.closed and closed is not None
    late = [(n, r) for n, r in [("gpu-01", 0), ("gpu-02", 1), ("gpu-04", 3)]]
    later = NOW + timedelta(seconds=60)
    for i, (node, rank) in enumerate(late):
        window, inc = _feed(
            window, topo, nccl_timeout(node, rank, "42", T0 + timedelta(minutes=32)), later, 20 + i
        )
        assert inc is None  # same verdict: coalesced
    assert not window.closed  # reopened: refined evidence of the ended attempt
    window, refined = tick(window, topo, later + timedelta(seconds=21), TIMING)
    assert refined is not None and refined.incident_id == first.incident_id
    assert (refined.category, refined.culprit.node) == (Category.HARDWARE_GPU, "gpu-03")
    assert refined.supporting[0].count == 3


def test_a_signal_long_after_the_end_opens_its_own_incident():
    topo, _ = _topology()
    window, first = _feed(None, topo, kernel_xid("gpu-03", 79, T0 + timedelta(minutes=1)), NOW, 1)
    topo, _ = apply_topology(
        topo, one(slurmctld_line("_job_complete: JobId=42 WEXITSTATUS 1", T0 + timedelta(minutes=2))), "c1"
    )
    window, _ = tick(window, topo, NOW + timedelta(seconds=25), TIMING)
    window, other = _feed(
        window, topo, kernel_xid("gpu-02", 79, T0 + timedelta(hours=2)), NOW + timedelta(seconds=30), 2
    )
    assert other is not None and other.incident_id != first.incident_id


def _throttled_gpu(minutes: int) -> list[Signal]:
    """gpu-03's GPU 1 throttles (HW thermal) from minute 2: the detector's node facts, routed to job 42."""
    board: straggler.PaceBoard | None = None
    out: list[Signal] = []
    for i in range(minutes):
        for g in range(4):
            hot = g == 1 and i >= 2
            metrics = {
                straggler.THROTTLE: 64.0 if hot else 0.0,
                straggler.SM_CLOCK: 1150.0 if hot else 1980.0,
            }
            sample = GpuTelemetry(
                time=T0 + timedelta(minutes=i), node="gpu-03", gpu=g, source="dcgm-exporter", metrics=metrics
            )
            board = straggler.observe_telemetry(board, sample)
            board, found = straggler.evaluate(board, str(g), straggler.StragglerConfig())
            if found is not None:
                sig = straggler.gpu_straggler_signal(found, NOW)
                out.append(sig.model_copy(update={"job_id": "42", "routed": True}))
    return out


def test_an_early_throttle_warning_is_a_provisional_incident_at_once_and_the_sustained_one_is_final():
    topo, _ = _topology()
    warning, sustained = _throttled_gpu(10)
    window = add_signal(None, topo, warning, "c1", NOW)
    window, first = decide_now(window, topo, NOW, TIMING)
    assert first is not None and first.provisional and first.revision == 1
    assert first.category == Category.HARDWARE_GPU and first.culprit is not None
    assert first.culprit.node == "gpu-03" and first.isolate == []
    window, nothing = tick(window, topo, NOW + timedelta(seconds=30), TIMING)
    assert nothing is None  # unchanged: no new provisional revision
    window = add_signal(window, topo, sustained, "c1", NOW + timedelta(seconds=60))
    window, final = decide_now(window, topo, NOW + timedelta(seconds=60), TIMING)
    assert final is not None and not final.provisional
    assert final.incident_id == first.incident_id and final.revision == 2
    assert final.root_cause.rule == "straggler.gpu_slow" and final.isolate


def test_an_early_throttle_warning_that_never_lasts_closes_still_provisional():
    topo, _ = _topology()
    warning = _throttled_gpu(3)[0]
    window = add_signal(None, topo, warning, "c1", NOW)
    window, _ = decide_now(window, topo, NOW, TIMING)
    window, closing = tick(window, topo, NOW + timedelta(seconds=TIMING.quiet_s), TIMING)
    assert closing is not None and closing.status == IncidentStatus.CLOSED
    assert closing.provisional  # the decide step never acts on it


def test_a_window_holds_each_revision_it_emits_until_it_is_known_sent():
    """A revision is kept whole in its window until the broker has it (``unsent``): a crash between
    the window's write and the send leaves it for the job's next owner to send again."""
    from streams.correlate.state import MAX_UNSENT, sent_upto, with_unsent

    topo, _ = _topology()
    window, first = _feed(None, topo, kernel_xid("gpu-03", 79, T0 + timedelta(minutes=1)), NOW, 1)
    assert first is not None and window.unsent == [first]
    second = first.model_copy(update={"revision": 2})
    held = window.model_copy(update={"unsent": with_unsent(window, second)})
    assert [i.revision for i in held.unsent] == [1, 2]
    assert [i.revision for i in sent_upto(held, 1).unsent] == [2]
    assert sent_upto(held, 2).unsent == []
    assert sent_upto(held, 0) is held  # nothing the broker has: the same window, nothing to write
    many = held
    for n in range(3, 3 + MAX_UNSENT):
        many = many.model_copy(update={"unsent": with_unsent(many, first.model_copy(update={"revision": n}))})
    assert len(many.unsent) == MAX_UNSENT and many.unsent[-1].revision == 2 + MAX_UNSENT
