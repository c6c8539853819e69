"""Hang detection (streams/correlate/progress.py): period, silence, first-silent ranks, ids."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from schemas.incidents import Category
from schemas.signals import Role, Signal
from streams.correlate import progress
from streams.correlate.progress import HangConfig, JobProgress, check, due_at, hang_signal, observe

T0 = datetime(2026, 11, 29, 3, 0, 0, tzinfo=UTC)
CFG = HangConfig(multiple=5.0, floor_s=300.0)
_ids = itertools.count()


def sig(
    role: Role = Role.PROGRESS,
    *,
    at: float = 0.0,
    step: int | None = None,
    rank: int | None = None,
    node: str | None = "gpu-01",
    rule: str | None = None,
    job: str = "42",
    **attrs: object,
) -> Signal:
    n = next(_ids)
    a: dict[str, object] = dict(attrs)
    if step is not None:
        a["step"] = step
    return Signal(
        signal_id=f"s{n}",
        rule=rule or ("progress.megatron_iteration" if role == Role.PROGRESS else "x.y"),
        role=role,
        summary="s",
        event_time=T0 + timedelta(seconds=at),
        observed_time=T0 + timedelta(seconds=at),
        node=node,
        job_id=job,
        rank=rank,
        attrs=a,
        text="t",
    )


def fold(signals: list[Signal], state: JobProgress | None = None) -> JobProgress:
    for s in signals:
        state = observe(state, s, s.event_time)
    assert state is not None
    return state


def steady(
    period: float, n: int, rank: int | None = None, start: float = 0.0, node: str = "gpu-01"
) -> list[Signal]:
    return [sig(at=start + i * period, step=(i + 1) * 10, rank=rank, node=node) for i in range(n)]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_period_is_the_median_of_recent_step_intervals():
    state = fold(steady(60.0, 6))
    assert state.period_s() == 60.0


def test_a_checkpoint_pause_does_not_stretch_the_median_period():
    lines = [*steady(60.0, 5), sig(at=4 * 60 + 600, step=60), sig(at=4 * 60 + 660, step=70)]
    assert fold(lines).period_s() == 60.0


def test_lines_repeating_the_same_step_add_no_interval():
    state = fold([sig(at=0, step=10), sig(at=30, step=10), sig(at=60, step=20)])
    assert state.sources["node:gpu-01"].intervals == [60.0]


def test_job_is_hung_after_multiple_of_period_when_above_floor():
    state = fold(steady(100.0, 5))  # last progress at 400 s, threshold 500 s
    assert check(state, at(400 + 499), CFG) is None
    found = check(state, at(400 + 500), CFG)
    assert found is not None and found.threshold_s == 500.0


def test_floor_holds_off_a_fast_job_that_paused_briefly():
    state = fold(steady(10.0, 10))  # period 10 s: 5x is 50 s, the floor says 300 s
    assert check(state, at(90 + 299), CFG) is None
    assert check(state, at(90 + 300), CFG) is not None


def test_with_one_line_the_period_is_bounded_by_time_since_the_job_started():
    alloc = sig(Role.TOPOLOGY, at=-200, rule="slurm.job_allocated")
    state = fold([alloc, sig(at=0, step=10)])
    assert state.period_s() == 200.0
    assert check(state, at(999), CFG) is None
    assert check(state, at(1000), CFG) is not None


def test_without_period_or_start_the_floor_is_multiplied():
    state = fold([sig(at=0, step=10)])
    assert progress.threshold_s(state, CFG) == 1500.0


def test_no_hang_after_the_job_completed():
    state = fold([*steady(60.0, 5), sig(Role.TOPOLOGY, at=250, rule="slurm.job_complete")])
    assert due_at(state, CFG) is None
    assert check(state, at(10_000), CFG) is None


def test_no_hang_after_the_last_megatron_iteration():
    state = fold([sig(at=0, step=990, total=1000), sig(at=60, step=1000, total=1000)])
    assert check(state, at(10_000), CFG) is None


def test_a_root_candidate_after_the_last_progress_suppresses_the_hang():
    state = fold([*steady(60.0, 5), sig(Role.ROOT_CANDIDATE, at=250, rule="gpu.xid")])
    assert check(state, at(10_000), CFG) is None


def test_new_progress_rearms_after_an_explained_failure():
    state = fold([*steady(60.0, 5), sig(Role.ROOT_CANDIDATE, at=250, rule="gpu.xid"), sig(at=300, step=60)])
    assert check(state, at(300 + 301), CFG) is not None


def test_nccl_watchdog_timeouts_are_counted_not_treated_as_explained():
    state = fold([*steady(60.0, 5), sig(Role.CASCADE, at=900, rule="nccl.watchdog_timeout", rank=3)])
    found = check(state, at(2000), CFG)
    assert found is not None and found.nccl_timeouts == 1 and found.nccl_ranks == [3]
    assert "NCCL watchdog timeouts" in hang_signal(found, at(2000)).summary


def test_a_hang_is_reported_once_per_silence():
    state = fold(steady(60.0, 5))
    found = check(state, at(1000), CFG)
    assert found is not None
    state = progress.mark_reported(state, found)
    assert check(state, at(5000), CFG) is None
    assert due_at(state, CFG) is None


def test_the_rank_that_went_silent_first_is_named():
    lines = []
    for i in range(6):
        lines += [sig(at=i * 60, step=(i + 1) * 10, rank=r, node=f"gpu-0{1 + r // 2}") for r in range(4)]
    lines += [sig(at=6 * 60, step=70, rank=r, node=f"gpu-0{1 + r // 2}") for r in (0, 1, 3)]  # rank 2 stops
    lines += [sig(at=7 * 60, step=80, rank=r, node=f"gpu-0{1 + r // 2}") for r in (0, 1, 3)]
    found = check(fold(lines), at(7 * 60 + 400), CFG)
    assert found is not None
    assert [s.rank for s in found.silent_first] == [2]
    signal = hang_signal(found, at(7 * 60 + 400))
    assert (signal.node, signal.rank) == ("gpu-02", 2)


def test_ranks_that_stopped_together_single_nobody_out():
    lines = []
    for i in range(6):
        lines += [sig(at=i * 60 + r * 0.2, step=(i + 1) * 10, rank=r) for r in range(4)]
    found = check(fold(lines), at(2000), CFG)
    assert found is not None and found.silent_first == []
    signal = hang_signal(found, at(2000))
    assert signal.node is None and signal.rank is None


def test_hang_signal_is_an_unknown_restartable_root_candidate_for_the_job():
    found = check(fold(steady(60.0, 5)), at(2000), CFG)
    assert found is not None
    signal = hang_signal(found, at(2000))
    assert signal.role == Role.ROOT_CANDIDATE and signal.category == Category.UNKNOWN
    assert signal.rule == progress.HANG_RULE and signal.job_id == "42" and signal.restartable


def test_hang_id_is_deterministic_for_the_same_silence_and_differs_per_attempt():
    a = check(fold(steady(60.0, 5)), at(2000), CFG)
    b = check(fold(steady(60.0, 5)), at(2600), CFG)  # checked later: same silence, same id
    assert a is not None and b is not None and a.signal_id == b.signal_id
    assert progress.hang_id("42", 1, T0, 60) != progress.hang_id("42", 2, T0, 60)


def test_a_new_allocation_starts_a_new_attempt_with_no_progress():
    state = fold([sig(Role.TOPOLOGY, at=-100, rule="slurm.job_allocated"), *steady(60.0, 5)])
    state = fold([sig(Role.TOPOLOGY, at=2000, rule="slurm.job_allocated")], state)
    assert state.attempt == 2 and state.sources == {}
    assert check(state, at(99_999), CFG) is None


def test_a_replayed_allocation_changes_nothing():
    alloc = sig(Role.TOPOLOGY, at=-100, rule="slurm.job_allocated")
    state = fold([alloc, *steady(60.0, 3)])
    assert fold([alloc], state) == state


def test_signals_of_a_job_without_progress_keep_no_state():
    assert observe(None, sig(Role.CASCADE, rule="nccl.watchdog_timeout"), T0) is None


def test_the_detectors_own_signals_are_ignored():
    state = fold(steady(60.0, 5))
    own = sig(Role.ROOT_CANDIDATE, at=900, rule=progress.HANG_RULE)
    assert observe(state, own, own.event_time) == state


def test_lines_without_a_step_each_count_as_one_interval():
    lines = [sig(at=i * 45.0, rule="progress.hf_trainer_log") for i in range(4)]
    assert fold(lines).period_s() == 45.0


def test_the_jobs_event_clock_is_its_newest_event_run_on_by_the_wall_clock():
    late = observe(
        fold(steady(60.0, 5)), sig(Role.CASCADE, at=900, rule="nccl.watchdog_timeout"), at(900), at(50)
    )
    assert late is not None
    assert late.event_now(at(50)) == at(900)
    assert late.event_now(at(60)) == at(910)
    assert check(late, late.event_now(at(50)), CFG) is not None  # 660 s silent on the job's clock


def test_a_framework_saying_training_finished_ends_the_watch():
    state = fold([*steady(60.0, 5), sig(at=260, rule="progress.lightning_fit_stopped")])
    assert state.ended and check(state, at(99_999), CFG) is None


def test_a_signal_that_changes_nothing_returns_the_very_same_state():
    state = fold([*steady(60.0, 5), sig(Role.ROOT_CANDIDATE, at=250, rule="gpu.xid")])
    again = sig(Role.CASCADE, at=260, rule="scheduler.srun_task_exit")
    assert observe(state, again, again.event_time, track_clock=False) is state
