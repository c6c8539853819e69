"""Node health (streams/correlate/node_health.py): weights, decay, repeats, episodes, snapshots."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta

from schemas.incidents import Category, IncidentKind, IncidentStatus
from schemas.signals import Role, Signal
from schemas.telemetry import GpuTelemetry
from streams.correlate import node_health as nh
from streams.correlate.node_health import HealthConfig, NodeHealthState

T0 = datetime(2026, 11, 29, 3, 0, 0, tzinfo=UTC)
CFG = HealthConfig(threshold=0.5, recover=0.7, half_life_s=3600.0)
_ids = itertools.count()


def xid(code: int, at: float = 0.0, gpu: str = "0000:3b:00", node: str = "gpu-03") -> Signal:
    n = next(_ids)
    return Signal(
        signal_id=f"x{n}",
        rule="gpu.xid",
        role=Role.ROOT_CANDIDATE,
        summary=f"Xid {code}",
        event_time=T0 + timedelta(seconds=at),
        observed_time=T0,
        node=node,
        gpu=gpu,
        attrs={"code": code},
        text=f"NVRM: Xid (PCI:{gpu}): {code}, ...",
    )


def rule_signal(rule: str, at: float = 0.0) -> Signal:
    n = next(_ids)
    return Signal(
        signal_id=f"r{n}",
        rule=rule,
        role=Role.ROOT_CANDIDATE,
        summary=rule,
        event_time=T0 + timedelta(seconds=at),
        observed_time=T0,
        node="gpu-03",
        text=rule,
    )


def tele(at: float, gpu: int = 2, **metrics: float) -> GpuTelemetry:
    return GpuTelemetry(
        time=T0 + timedelta(seconds=at), node="gpu-03", gpu=gpu, source="dcgm-exporter", metrics=metrics
    )


def fold(items: list[Signal | GpuTelemetry], state: NodeHealthState | None = None) -> NodeHealthState:
    for it in items:
        if isinstance(it, Signal):
            state = nh.observe_signal(state, it, CFG)
        else:
            state = nh.observe_telemetry(state, it, CFG)
    assert state is not None
    return state


def test_unrelated_signals_create_no_state():
    assert nh.observe_signal(None, xid(79), CFG) is None
    assert nh.observe_telemetry(None, tele(0, DCGM_FI_DEV_GPU_TEMP=60.0), CFG) is None


def test_one_row_remap_failure_is_enough_to_fall_below_the_threshold():
    state = fold([xid(64)])
    assert math.isclose(nh.health(state), math.exp(-1.0))
    assert nh.health(state) < CFG.threshold


def test_a_single_xid13_costs_nothing_but_repeats_on_one_gpu_do():
    one = fold([xid(13)])
    assert nh.health(one) == 1.0
    three = fold([xid(13, 0), xid(13, 10), xid(13, 20)])
    assert math.isclose(nh.health(three), math.exp(-0.5), rel_tol=1e-2)  # less 20 s of decay


def test_repeats_count_per_gpu_not_per_node():
    spread = fold([xid(13, 0, gpu="0000:3b:00"), xid(13, 1, gpu="0000:5e:00"), xid(31, 2, gpu="0000:86:00")])
    assert nh.health(spread) == 1.0


def test_link_flaps_add_up():
    state = fold([rule_signal("network.link_down", i * 30.0) for i in range(4)])
    assert math.isclose(nh.components(state)["link_flap"], 0.8, rel_tol=1e-2)  # less 90 s of decay


def test_evidence_halves_every_half_life():
    state = fold([xid(64, 0)])
    later = nh.advance(state, T0 + timedelta(seconds=3600), CFG)
    assert math.isclose(sum(later.penalties.values()), 0.5)


def test_late_evidence_is_faded_to_its_age():
    state = fold([xid(92, 3600), xid(92, 0)])  # the second arrived an hour late
    assert math.isclose(sum(state.penalties.values()), 0.3 + 0.15)


def test_sbe_counter_increments_are_penalised_with_a_burst_cap_and_resets_ignored():
    state = fold(
        [
            tele(0, DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=100.0),  # first sight: a baseline, no penalty
            tele(60, DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=110.0),  # +10: 0.1
            tele(120, DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=900.0),  # +790: capped at 0.3
            tele(180, DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=0.0),  # a counter reset is not errors
        ],
    )
    assert math.isclose(nh.components(state)["ecc_sbe"], 0.4, rel_tol=1e-2)  # less 3 min of decay


def test_a_single_correctable_error_keeps_the_node_healthy():
    state = fold([tele(0, DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=0.0), tele(60, DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=1.0)])
    assert nh.health(state) > 0.95
    _, incident = nh.evaluate(state, "c", T0, CFG)
    assert incident is None


def test_remap_pending_flag_counts_when_it_turns_on_not_every_sample():
    state = fold([tele(i * 60.0, DCGM_FI_DEV_ROW_REMAP_PENDING=1.0) for i in range(5)])
    assert nh.components(state) == {"row_remap_pending": 0.4}


def test_thermal_throttle_samples_accumulate():
    state = fold([tele(i * 60.0, DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=64.0) for i in range(10)])
    assert 0.45 < nh.components(state)["thermal"] <= 0.5


def test_below_threshold_opens_one_degrading_incident_for_the_node():
    state = fold([xid(92, 0), xid(92, 60), xid(63, 120)])
    state, incident = nh.evaluate(state, "local", T0, CFG)
    assert incident is not None
    assert incident.job_id == "node:gpu-03" and incident.kind == IncidentKind.DEGRADING
    assert incident.category == Category.HARDWARE_GPU and incident.status == IncidentStatus.OPEN
    assert incident.culprit is not None and incident.culprit.gpu == "0000:3b:00"
    assert incident.isolate == [] and incident.restartable  # pre-emptive: the policy decides
    state = fold([xid(92, 180)], state)
    _, again = nh.evaluate(state, "local", T0, CFG)
    assert again is None


def test_the_episode_closes_with_a_closing_revision_after_recovery():
    state, opened = nh.evaluate(fold([xid(64, 0)]), "local", T0, CFG)
    assert opened is not None
    state = nh.advance(state, T0 + timedelta(hours=3), CFG)  # 1.0 -> 0.125: health 0.88
    state, closed = nh.evaluate(state, "local", T0, CFG)
    assert closed is not None and closed.status == IncidentStatus.CLOSED
    assert closed.incident_id == opened.incident_id and closed.revision == 2 and closed.isolate == []
    assert state.degrading_since is None


def test_degrading_incident_id_is_deterministic():
    _, a = nh.evaluate(fold([xid(64, 0)]), "local", T0, CFG)
    _, b = nh.evaluate(fold([xid(64, 0)]), "local", T0 + timedelta(minutes=5), CFG)
    assert a is not None and b is not None and a.incident_id == b.incident_id


def test_link_flaps_make_a_network_degrading_incident():
    state = fold([rule_signal("network.link_down", i * 30.0) for i in range(4)])
    _, incident = nh.evaluate(state, "local", T0, CFG)
    assert incident is not None and incident.category == Category.HARDWARE_NETWORK
    assert incident.culprit is not None and incident.culprit.gpu is None


def test_a_dimm_that_keeps_logging_corrected_errors_makes_a_host_degrading_incident():
    few = fold([rule_signal("host.edac_corrected", i * 60.0) for i in range(3)])
    assert nh.evaluate(few, "local", T0, CFG)[1] is None  # a few corrected errors are noise
    many = fold([rule_signal("host.edac_corrected", i * 60.0) for i in range(8)])
    _, incident = nh.evaluate(many, "local", T0 + timedelta(minutes=8), CFG)
    assert incident is not None and incident.category == Category.HARDWARE_HOST
    assert incident.culprit is not None and incident.culprit.node == "gpu-03" and incident.culprit.gpu is None
    assert incident.isolate == []  # pre-emptive: the policy decides, after the node's jobs end


def test_confidence_grows_as_health_falls():
    _, mild = nh.evaluate(fold([xid(64)]), "c", T0, CFG)
    _, severe = nh.evaluate(fold([xid(64), xid(64, 1, gpu="0000:5e:00")]), "c", T0, CFG)
    assert mild is not None and severe is not None and mild.confidence < severe.confidence


def test_snapshot_carries_score_components_and_worst_gpu_and_is_published_on_change():
    state = fold([xid(92, 0)])
    assert nh.snapshot_due(state, CFG)
    snap = nh.snapshot(state, "local")
    assert snap.node == "gpu-03" and math.isclose(snap.score, math.exp(-0.3), rel_tol=1e-3)
    assert snap.components == {"ecc_sbe": 0.3} and snap.worst_gpu == "0000:3b:00"
    state = nh.mark_published(state)
    assert not nh.snapshot_due(state, CFG)
    assert nh.snapshot_due(fold([xid(92, 10)], state), CFG)


def test_an_amd_gpu_s_corrected_error_counts_weigh_like_nvidia_s_single_bit_messages():
    amd = fold([rule_signal("gpu.amd_ras_correctable", at=i) for i in range(3)])
    nvidia = fold([rule_signal("gpu.ecc_sbe", at=i) for i in range(3)])
    assert nh.components(amd) == nh.components(nvidia)
    assert nh.signal_kind(rule_signal("gpu.amd_ras_uncorrectable")) is None  # a root, not degradation


def test_an_nvswitch_that_keeps_logging_non_fatal_errors_degrades_its_node():
    few = fold([rule_signal("gpu.sxid_nonfatal", i * 60.0) for i in range(2)])
    assert nh.evaluate(few, "local", T0, CFG)[1] is None  # a couple are noise
    fm = fold([rule_signal("gpu.fm_sxid_nonfatal", i * 60.0) for i in range(2)])
    assert nh.components(fm) == nh.components(few)  # Fabric Manager's log says the same
    many = fold([rule_signal("gpu.sxid_nonfatal", i * 60.0) for i in range(6)])
    _, incident = nh.evaluate(many, "local", T0 + timedelta(minutes=6), CFG)
    assert incident is not None and incident.category == Category.HARDWARE_GPU
    assert incident.isolate == []


def test_dcgm_reporting_pcie_replays_or_nvlink_errors_again_and_again_degrades_the_node():
    for rule in ("gpu.pcie_replays", "gpu.nvlink_errors"):
        once = fold([rule_signal(rule)])
        assert nh.evaluate(once, "local", T0, CFG)[1] is None  # one report over a limit is a watch
        again = fold([rule_signal(rule, i * 60.0) for i in range(6)])
        _, incident = nh.evaluate(again, "local", T0 + timedelta(minutes=6), CFG)
        assert incident is not None and incident.category == Category.HARDWARE_GPU, rule


def test_dcgms_nvswitch_non_fatal_message_weighs_like_the_kernels_sxid_line():
    dcgm = fold([rule_signal("gpu.dcgm_nvswitch_nonfatal", i * 60.0) for i in range(3)])
    kernel = fold([rule_signal("gpu.sxid_nonfatal", i * 60.0) for i in range(3)])
    assert nh.components(dcgm) == nh.components(kernel)
