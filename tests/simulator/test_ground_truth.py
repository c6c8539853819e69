from __future__ import annotations

import re
from pathlib import Path

import pytest

from connectors.sources.simulator import SCENARIO_TYPES, SCENARIOS, SimOptions, generate, write_files
from schemas.incidents import Category

TYPES = [s.name for s in SCENARIO_TYPES]
ISOLATING = {
    Category.HARDWARE_GPU,
    Category.HARDWARE_NETWORK,
    Category.HARDWARE_HOST,
    Category.SYSTEM_SOFTWARE,
}


def test_at_least_25_types_with_healthy_noise_among_them():
    assert len(TYPES) >= 25
    assert {s.category for s in SCENARIO_TYPES} == set(Category)
    healthy = {s.name for s in SCENARIO_TYPES if s.healthy}
    assert {"noise_xid13_single", "noise_single_sbe", "noise_nccl_chatter", "noise_user_scancel"} <= healthy


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_type_generates_and_its_truth_matches_its_lines(name: str, seed: int, tmp_path: Path):
    sc = generate(name, seed)
    t = sc.truth
    st = SCENARIOS[name]
    assert t.scenario_type == name and t.seed == seed
    assert t.category == st.category and t.healthy == st.healthy
    assert sc.events == sorted(sc.events, key=lambda e: e.sort_key())
    assert t.start_time <= t.decisive_time <= t.end_time

    folder = write_files(sc, tmp_path)
    files = {p: p.read_text() for p in (folder / "logs").rglob("*") if p.is_file()}
    assert (folder / "truth.json").is_file() and not list((folder / "logs").rglob("truth*"))
    if t.decisive_line is not None:
        holders = [p for p, text in files.items() if t.decisive_line in text.splitlines()]
        assert holders, "the decisive line is in the emitted files"
        decisive = [e for e in sc.events if e.decisive]
        assert len(decisive) == 1 and decisive[0].line == t.decisive_line
        assert decisive[0].time == t.decisive_time
        assert t.decisive_host == decisive[0].origin
    else:
        assert name == "hang_no_error"

    if t.healthy:
        assert t.actions == [] and t.culprit_node is None
    if t.culprit_node is not None:
        assert t.culprit_node in t.job_nodes
        if t.decisive_source in ("kernel", "telemetry", "training") and t.category in ISOLATING:
            assert t.decisive_host == t.culprit_node
    if t.category in ISOLATING:
        assert t.culprit_node is not None
        assert f"drain_node {t.culprit_node}" in t.actions
        if t.restartable:
            assert f"requeue_job {t.job_id} excluding {t.culprit_node}" in t.actions
    else:
        assert not any(a.startswith("drain_node") for a in t.actions)
    if t.culprit_gpu is not None:
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:00", t.culprit_gpu)
        if t.decisive_line and "NVRM: Xid" in t.decisive_line:
            assert t.culprit_gpu in t.decisive_line
        if t.decisive_line and "DCGM_FI_" in t.decisive_line:
            assert f'"gpu":"{t.culprit_gpu_index}"' in t.decisive_line


def test_the_decisive_kernel_line_comes_from_the_culprit_node_file(tmp_path: Path):
    for seed in range(5):
        sc = generate("xid79_fallen_off_bus", seed)
        folder = write_files(sc, tmp_path)
        node_dir = folder / "logs" / "nodes" / sc.truth.culprit_node  # type: ignore[operator]
        assert any(sc.truth.decisive_line in p.read_text() for p in node_dir.iterdir())


def test_restart_loop_has_three_attempts_on_disjoint_nodes():
    sc = generate("restart_loop_no_progress", 3)
    lines = [e.line for e in sc.events if e.kind == "scheduler"]
    allocs = [ln for ln in lines if "sched: Allocate" in ln or "_start_job: Started" in ln]
    assert len(allocs) == 3
    assert sum("Requeuing JobId=" in ln for ln in lines) == 2
    assert sc.truth.attempts == 3 and len(set(sc.truth.job_nodes)) == len(sc.truth.job_nodes)
    loads = {
        ln.split("iteration")[-1].strip() for ln in (e.line for e in sc.events) if "loaded checkpoint" in ln
    }
    assert len(loads) <= 1  # every attempt resumed from the same checkpoint


@pytest.mark.parametrize("seed", range(1, 41))
def test_restart_loop_saves_no_checkpoint_after_its_first_crash(seed: int):
    """The truth says restarting does not help: no attempt may get as far as a new save. An attempt
    resumes at an iteration that need not be a multiple of the save interval, so the crash must come
    before the next multiple, whatever the resume point (seeds 26 and one more saved before the fix)."""
    from datetime import UTC, datetime

    from schemas.raw import LogLine
    from streams.correlate.progress import is_checkpoint_save
    from streams.extract.extractor import Extractor

    sc = generate("restart_loop_no_progress", seed)
    first_crash = min(e.time for e in sc.events if e.kind == "kernel" and "Xid" in e.line)
    extractor = Extractor()
    now = datetime.now(UTC)
    saves_after = [
        e.line
        for e in sc.events
        if e.kind == "training" and e.time > first_crash
        for sig in extractor.extract(LogLine(text=e.line, adapter="plain"), now)
        if is_checkpoint_save(sig)
    ]
    assert saves_after == []


def test_noise_scenarios_keep_training_after_the_noise():
    sc = generate("noise_xid13_single", 4)
    after = [e for e in sc.events if e.kind == "training" and e.time > sc.truth.decisive_time]
    assert after, "training goes on after the Xid 13"


@pytest.mark.parametrize(
    "options",
    [
        SimOptions(telemetry_every_s=0, max_nodes=4, pre_fault_min_s=60, pre_fault_max_s=240),
        SimOptions(min_nodes=1, max_nodes=1),
        SimOptions(min_nodes=8, max_nodes=8, pre_fault_min_s=30, pre_fault_max_s=30),
    ],
    ids=["scoreboard", "single-node", "short-and-wide"],
)
def test_every_type_generates_under_other_options(options: SimOptions):
    for name in TYPES:
        for seed in range(8):
            sc = generate(name, seed, options=options)
            assert sc.truth.decisive_time >= sc.truth.start_time
            assert all(len(sc.job.ranks_on(n)) == 8 for n in sc.job.nodes)
