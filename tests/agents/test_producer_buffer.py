"""The worker's buffer of table writes: Faust flushes it before committing input offsets, so its flush
must not return while a write is still queued, however slowly the producer takes them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.transport.producer import ProducerBuffer

from streams.app import PRODUCER_BUFFER_MESSAGES, DrainingBuffer, create_app
from streams.settings import Settings

SLOW_HANDOVER_S = 0.25  # a partition without a leader: aiokafka's send waits longer than Faust's 0.1 s


class SlowChannel:
    """Takes each write the way aiokafka's send does while a partition's leader is being elected."""

    def __init__(self) -> None:
        self.published: list[Any] = []

    async def publish_message(self, fut: Any, wait: bool = False) -> None:
        await asyncio.sleep(SLOW_HANDOVER_S)
        self.published.append(fut)


def queue_writes(buffer: ProducerBuffer, channel: SlowChannel, n: int) -> None:
    buffer.app = SimpleNamespace(conf=SimpleNamespace(producer_threaded=False))  # type: ignore[assignment]
    for i in range(n):
        buffer.put(SimpleNamespace(message=SimpleNamespace(channel=channel), n=i))  # type: ignore[arg-type]


async def flush_after_queueing(buffer: ProducerBuffer, n: int) -> tuple[int, int]:
    """How many writes had reached the producer when ``flush`` returned, and how many in all."""
    channel = SlowChannel()
    queue_writes(buffer, channel, n)
    await buffer.start()
    try:
        await buffer.flush()
        handed = len(channel.published)
        while len(channel.published) < n:
            await asyncio.sleep(0.05)
        return handed, len(channel.published)
    finally:
        await buffer.stop()


def test_flush_returns_only_when_every_queued_write_is_with_the_producer() -> None:
    handed, total = asyncio.run(flush_after_queueing(DrainingBuffer(), 3))
    assert (handed, total) == (3, 3)


def test_faust_stock_flush_returns_with_writes_still_queued() -> None:
    """Why ``DrainingBuffer`` exists. If a Faust upgrade makes this fail, the stock flush drains and
    the subclass can go."""
    handed, total = asyncio.run(flush_after_queueing(ProducerBuffer(), 3))
    assert handed < total == 3


def test_flush_of_an_empty_buffer_returns_at_once() -> None:
    handed, total = asyncio.run(flush_after_queueing(DrainingBuffer(), 0))
    assert (handed, total) == (0, 0)


def test_the_workers_producer_uses_the_draining_buffer() -> None:
    app = create_app(Settings(kafka_bootstrap="127.0.0.1:1"), store="memory://")
    buffer = app.producer.buffer
    assert isinstance(buffer, DrainingBuffer)
    assert buffer.max_messages == PRODUCER_BUFFER_MESSAGES
    assert buffer.app is app


class FirstSlowChannel(SlowChannel):
    """Slow for the first write only: a second sender running beside the first would overtake it."""

    async def publish_message(self, fut: Any, wait: bool = False) -> None:
        await asyncio.sleep(SLOW_HANDOVER_S if fut.n == 0 else 0.01)
        self.published.append(fut)


async def writes_while_flushing(buffer: ProducerBuffer) -> list[int]:
    """Writes queued before the buffer starts, more while the sender is busy and a flush runs: the
    order in which they reached the producer."""
    channel = FirstSlowChannel()
    queue_writes(buffer, channel, 3)
    await buffer.start()
    try:
        await asyncio.sleep(SLOW_HANDOVER_S / 2)  # the sender is handing over the first write
        for i in range(3, 6):
            buffer.put(SimpleNamespace(message=SimpleNamespace(channel=channel), n=i))  # type: ignore[arg-type]
        await buffer.flush()
        return [fut.n for fut in channel.published]
    finally:
        await buffer.stop()


def test_writes_reach_the_producer_in_the_order_they_were_made_whoever_hands_them_over() -> None:
    assert asyncio.run(writes_while_flushing(DrainingBuffer())) == [0, 1, 2, 3, 4, 5]
