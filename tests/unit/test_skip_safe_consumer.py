"""The consumer never acknowledges a message its stream skipped during a rebalance (streams/app.py):
that acknowledgement let the commit pass offsets nothing had handled."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP as TopicPartition
from intervaltree import IntervalTree

from streams.app import SickbayConsumerTransport, SkipSafeConsumer, _tps, create_app, skipped_by_the_stream
from streams.settings import Settings


def _app(generation: int = 3, flowing: bool = True) -> Any:
    return SimpleNamespace(
        consumer_generation_id=generation,
        flow_control=SimpleNamespace(is_active=lambda: flowing),
        topics=SimpleNamespace(acks_enabled_for=lambda topic: True),
    )


def _consumer(app: Any) -> SkipSafeConsumer:
    """The consumer's ``ack`` and flow alone, on a bare instance (a started consumer needs a broker);
    its flow runs, as after a recovery that read changelogs."""
    consumer = SkipSafeConsumer.__new__(SkipSafeConsumer)
    consumer.app = app
    consumer.can_resume_flow = asyncio.Event()
    consumer.suspend_flow = asyncio.Event()
    consumer.resume_flow()
    return consumer


TP = TopicPartition("t", 2)


def _message(tracked: bool, generation: int = 3, offset: int = 5) -> Any:
    return SimpleNamespace(
        tracked=tracked, generation_id=generation, acked=False, topic="t", partition=2, offset=offset, tp=TP
    )


def _with_offsets(consumer: SkipSafeConsumer, committed: int, acked: list[int]) -> SkipSafeConsumer:
    """The bookkeeping Faust's commit reads (``_new_offset``), as a started consumer holds it."""
    consumer._committed_offset = defaultdict(lambda: None, {TP: committed})
    consumer._acked = defaultdict(list, {TP: list(acked)})
    consumer._acked_index = defaultdict(set, {TP: set(acked)})
    consumer._gap = defaultdict(IntervalTree)
    return consumer


@pytest.mark.parametrize(
    ("tracked", "generation", "flowing", "skipped"),
    [
        (False, 2, True, True),  # fetched under the previous generation
        (False, 3, False, True),  # found in the queue while the rebalance held the flow
        (True, 3, True, False),  # handled
        (True, 2, False, False),  # handled before the rebalance began
        (False, 3, True, False),  # undecodable: the conductor acknowledges it while the flow runs
    ],
)
def test_only_a_message_skipped_in_a_rebalance_counts_as_skipped(tracked, generation, flowing, skipped):
    assert skipped_by_the_stream(_app(3, flowing), _message(tracked, generation)) is skipped


def test_a_skipped_message_is_settled_without_an_ack():
    consumer = _consumer(_app(3, flowing=False))
    message = _message(tracked=False)
    with mock.patch.object(faust_aiokafka.Consumer, "ack", return_value=True) as faust_ack:
        assert consumer.ack(message) is False
    faust_ack.assert_not_called()
    assert message.acked  # the stream's later calls for it change nothing


def test_a_handled_message_is_acknowledged_by_faust():
    consumer = _consumer(_app(3, flowing=False))
    message = _message(tracked=True)
    with mock.patch.object(faust_aiokafka.Consumer, "ack", return_value=True) as faust_ack:
        assert consumer.ack(message) is True
    faust_ack.assert_called_once_with(message)


def test_faust_alone_commits_past_a_missing_offset_at_the_committed_position():
    """The tolerance the consumer guards: offset 5 was never acknowledged, yet the commit passes it."""
    consumer = _with_offsets(_consumer(_app()), committed=5, acked=[6, 7])
    assert faust_aiokafka.Consumer._new_offset(consumer, TP) == 8


def test_a_message_withheld_at_the_committed_position_holds_the_partitions_commit():
    consumer = _with_offsets(_consumer(_app(3, flowing=False)), committed=5, acked=[6, 7])
    with mock.patch.object(faust_aiokafka.Consumer, "ack", return_value=True):
        consumer.ack(_message(tracked=False, offset=5))
    assert consumer._new_offset(TP) is None


def test_a_message_withheld_past_the_committed_position_leaves_the_commit_to_faust():
    consumer = _with_offsets(_consumer(_app(3, flowing=False)), committed=5, acked=[5, 6])
    with mock.patch.object(faust_aiokafka.Consumer, "ack", return_value=True):
        consumer.ack(_message(tracked=False, offset=7))
    assert consumer._new_offset(TP) == 7  # up to the withheld offset, not past it


async def test_the_seek_after_the_rebalance_forgets_the_withheld_offsets():
    consumer = _with_offsets(_consumer(_app(3, flowing=False)), committed=5, acked=[6, 7])
    with mock.patch.object(faust_aiokafka.Consumer, "ack", return_value=True):
        consumer.ack(_message(tracked=False, offset=5))
    with mock.patch.object(faust_aiokafka.Consumer, "perform_seek", new=mock.AsyncMock()) as seek:
        await consumer.perform_seek()
    seek.assert_awaited_once()
    assert consumer._new_offset(TP) == 8  # Faust's answer again: the seek reads offset 5 anew


async def test_the_seek_stops_the_flow_so_nothing_reaches_a_queue_the_recovery_then_empties():
    """Faust's recovery resumes flow control after the seek, and that empties every stream's queue:
    the fetcher must deliver nothing between a partition's seek and then (it resumes the flow last)."""
    consumer = _with_offsets(_consumer(_app(3)), committed=5, acked=[])
    consumer._read_offset = defaultdict(lambda: None, {TP: 9})
    during: list[tuple[bool, bool]] = []

    async def seek_to_committed() -> dict[Any, int]:
        during.append((consumer.flow_active, consumer.suspend_flow.is_set()))
        return {TP: 5}

    consumer.seek_to_committed = seek_to_committed  # type: ignore[method-assign]
    await consumer.perform_seek()
    assert during == [(False, True)]  # stopped before the first partition's seek
    assert (consumer.flow_active, consumer._read_offset[TP], consumer._committed_offset[TP]) == (False, 5, 5)
    consumer.resume_flow()  # the recovery's last step
    assert consumer.flow_active and not consumer.suspend_flow.is_set()


def test_the_app_consumes_through_the_skip_safe_consumer(tmp_path):
    app = create_app(Settings(state_dir=tmp_path), store="memory://")
    assert isinstance(app.transport, SickbayConsumerTransport)
    assert app.transport.Consumer is SkipSafeConsumer


def test_faust_alone_commits_a_never_committed_partition_over_a_withheld_offset():
    """The hole the cap closes: with no committed offset Faust checks nothing at the run's head."""
    consumer = _with_offsets(_consumer(_app()), committed=5, acked=[4, 5])
    consumer._committed_offset = defaultdict(lambda: None)
    assert faust_aiokafka.Consumer._new_offset(consumer, TP) == 6


def test_a_never_committed_partition_is_committed_up_to_its_lowest_withheld_offset_only():
    consumer = _with_offsets(_consumer(_app(3, flowing=False)), committed=5, acked=[4, 5])
    consumer._committed_offset = defaultdict(lambda: None)  # never committed
    with mock.patch.object(faust_aiokafka.Consumer, "ack", return_value=True):
        consumer.ack(_message(tracked=False, offset=3))
    assert consumer._new_offset(TP) == 3  # offset 3 is read again after the seek, 4 and 5 with it


class _Thread:
    """The consumer thread as aiokafka answers it: committed offsets, first offsets (2 each), seeks."""

    def __init__(self, committed: dict[Any, int | None]) -> None:
        self.committed = committed
        self.to_beginning: list[Any] = []

    async def seek_to_committed(self) -> dict[Any, int | None]:
        return self.committed

    async def earliest_offsets(self, *partitions: Any) -> dict[Any, int]:
        return dict.fromkeys(partitions, 2)

    def seek(self, partition: Any, offset: int) -> None:
        assert offset == 2  # the partition's first offset, sought directly: no reset in between
        self.to_beginning.append(partition)


async def test_a_stream_partition_without_a_committed_offset_is_read_again_from_its_first_offset():
    """aiokafka leaves such a partition where its fetcher stands; what the rebalance dropped there
    would be skipped. A changelog (never committed, not acknowledged) keeps its position."""
    fresh, at_zero, committed = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
    changelog = TopicPartition("app-table-changelog", 0)
    app = _app()
    app.topics = SimpleNamespace(acks_enabled_for=lambda topic: topic == "t")
    consumer = _consumer(app)
    thread = _Thread({fresh: None, at_zero: 0, committed: 7, changelog: None})
    consumer._thread = thread  # type: ignore[attr-defined]
    assert await consumer.seek_to_committed() == thread.committed
    assert sorted(thread.to_beginning) == [fresh, at_zero]


async def test_every_stream_partition_committed_means_no_seek_to_the_beginning():
    app = _app()
    consumer = _consumer(app)
    thread = _Thread({TopicPartition("t", 0): 3, TopicPartition("t", 1): 12})
    consumer._thread = thread  # type: ignore[attr-defined]
    await consumer.seek_to_committed()
    assert thread.to_beginning == []


def test_the_log_names_a_dozen_partitions_and_counts_the_rest():
    tps = [TopicPartition("t", p) for p in range(15, -1, -1)]
    assert _tps(tps[:2]) == "t[14], t[15]"
    assert _tps(tps).endswith("t[11] and 4 more") and _tps(tps).startswith("t[0], t[1],")
