"""A rank busy with its own work while the others time out in a collective (application), versus a
rank that hung (unknown, a suspect): the NCCL watchdogs read the same, the busy rank's progress
bar tells them apart. Real shapes: LlamaFactory#2424 (rank 0 tokenizing for 30 minutes)."""

from __future__ import annotations

from datetime import timedelta

from schemas.incidents import Category, Culprit
from schemas.signals import Role
from streams.correlate.attribution import attribute
from streams.correlate.correlator import window_from
from streams.correlate.lookback import MAX_RANKS, recall, remember
from tests.factories import T0, job_output, nccl_timeout, one, signals

BAR = "[rank0]:Running tokenizer on dataset:  45%|████▌     | 450000/1000000 [12:01<14:41, 623.40 examples/s]"
TIMEOUTS_AT = T0 + timedelta(minutes=10)  # 600 s after the collective began, at T0


def _timeouts(ranks: range) -> list:
    return [
        one(
            nccl_timeout(f"gpu-0{r // 8 + 1}", r, "42", TIMEOUTS_AT + timedelta(milliseconds=r)),
            offset=100 + r,
        )
        for r in ranks
    ]


def _bar(at_s: float, line: str = BAR, offset: int = 1):
    return one(job_output("gpu-01", "42", T0 + timedelta(seconds=at_s), line), offset=offset)


def _verdict(sigs: list):
    window = window_from(sigs, "c1", "42", T0)
    assert window is not None
    return attribute(window, None)


def test_a_rank_printing_its_own_progress_while_the_others_time_out_is_an_application_fault():
    v = _verdict([_bar(300), *_timeouts(range(1, 16))])
    # the busy rank is named (where to look) but nothing is drained: its work, not its node, was slow
    assert (v.category, v.restartable, v.culprit, v.isolate) == (
        Category.APPLICATION,
        False,
        Culprit(node="gpu-01", rank=0),
        [],
    )
    assert v.root.rule == "progress.rank_local_work_bar" and v.root.rank == 0


def test_a_bar_from_before_the_others_entered_the_collective_does_not_excuse_a_silent_rank():
    v = _verdict([_bar(-60), *_timeouts(range(1, 16))])  # it printed, then went quiet: hung, not busy
    assert v.category == Category.UNKNOWN and v.restartable


def test_a_rank_that_timed_out_itself_was_not_busy_elsewhere():
    v = _verdict([_bar(300), *_timeouts(range(16))])
    assert v.category == Category.UNKNOWN


def test_a_training_bar_is_not_rank_local_work():
    line = "[rank0]:Epoch 0:  10%|█         | 100/1000 [00:30<04:30,  3.33it/s, loss=2.31, v_num=0]"
    sigs = [s for s in [_bar(300, line)] if s.rule == "progress.rank_local_work_bar"]
    assert sigs == []


def test_an_unlabelled_bar_on_the_same_line_as_a_timeout_counts_for_rank_0():
    # tqdm ends its bar with \r, so the next message lands on the same physical line
    line = (
        "Running tokenizer on dataset:   9%|███▊      | 280000/2969526 [29:55<4:48:08, 155.57 examples/s]"
        "[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800328 "
        "milliseconds before timing out."
    )
    sigs = signals(job_output("gpu-01", "42", TIMEOUTS_AT, line))
    [bar] = [s for s in sigs if s.rule == "progress.rank_local_work_bar"]
    assert bar.rank is None  # the [Rank 2] after the bar is the next message's
    v = _verdict(sigs)
    assert (v.category, v.restartable, v.culprit) == (
        Category.APPLICATION,
        False,
        Culprit(node="gpu-01", rank=0),
    )


def test_the_look_back_keeps_the_latest_bar_per_rank_and_rewrites_it_at_most_once_a_minute():
    held = remember(None, _bar(0))
    assert held is not None
    assert remember(held, _bar(30, offset=2)) is None  # refreshed within the minute: no write
    newer = remember(held, _bar(90, offset=3))
    assert newer is not None and [s.event_time for s in recall(newer)] == [T0 + timedelta(seconds=90)]
    many = None
    for r in range(MAX_RANKS + 3):
        line = BAR.replace("[rank0]", f"[rank{r}]")
        many = remember(many, _bar(r, line, offset=10 + r)) or many
    assert many is not None and len(many) == MAX_RANKS
    assert min(s.rank for s in recall(many)) == 3  # the oldest went first


def test_the_hang_detectors_silence_with_a_busy_rank_is_still_rank_local_work():
    bar = _bar(300)
    hang = bar.model_copy(
        update={
            "signal_id": "hang-1",
            "rule": "hang.no_progress",
            "role": Role.ROOT_CANDIDATE,
            "category": Category.UNKNOWN,
            "restartable": True,
            "rank": None,
            "event_time": T0 + timedelta(minutes=8),
        }
    )
    v = _verdict([bar, hang, *_timeouts(range(1, 16))])
    assert (v.category, v.restartable, v.isolate) == (Category.APPLICATION, False, [])
    assert v.culprit is not None and v.culprit.rank == 0
    alone = _verdict([hang, *_timeouts(range(1, 16))])  # no bar: the hang stands
    assert alone.root.rule == "hang.no_progress"
