"""The correlate stage's parsed copies of its tables (streams/correlate/table_cache.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from schemas import codec
from streams.correlate.state import JobTopology
from streams.correlate.table_cache import TableCache


class CountingTable(dict[str, Any]):
    """A dict standing in for a Faust table, counting reads."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        self.reads += 1
        return super().get(key, default)


def test_a_write_goes_to_the_table_as_json_bytes_and_later_reads_skip_the_table():
    table = CountingTable()
    cache = TableCache(table, JobTopology, bound=8)
    cache.put("j1", JobTopology(job_id="j1", attempt=2, nodes=["gpu-1"]))
    assert isinstance(table["j1"], bytes) and codec.loads(table["j1"])["attempt"] == 2
    assert cache.get("j1") == JobTopology(job_id="j1", attempt=2, nodes=["gpu-1"])
    assert table.reads == 0


def test_a_miss_is_remembered_too_and_a_drop_removes_the_tables_entry():
    table = CountingTable({"j2": codec.dumps({"job_id": "j2", "attempt": 1})})
    cache = TableCache(table, JobTopology, bound=8)
    assert cache.get("nope") is None and cache.get("nope") is None
    assert table.reads == 1
    assert cache.get("j2") is not None
    cache.drop("j2")
    assert "j2" not in table and cache.get("j2") is None


def test_the_oldest_entry_goes_when_full_and_clear_rereads_the_table():
    table = CountingTable({f"j{i}": codec.dumps({"job_id": f"j{i}"}) for i in range(3)})
    cache = TableCache(table, JobTopology, bound=2)
    for key in ("j0", "j1", "j2"):
        cache.get(key)
    assert list(cache.parsed) == ["j1", "j2"]
    table["j2"] = codec.dumps({"job_id": "j2", "attempt": 5})  # a recovery refilled it behind our back
    cache.clear()
    topo = cache.get("j2")
    assert topo is not None and topo.attempt == 5


def test_stored_items_decode_every_value_of_the_table():
    table = CountingTable({b"j1": codec.dumps({"job_id": "j1", "closed": True}), "j2": b""})
    cache = TableCache(table, JobTopology, bound=8)
    assert cache.stored_items() == [("j1", {"job_id": "j1", "closed": True})]


class WriteCountingTable(CountingTable):
    writes = 0

    def __setitem__(self, key: str, value: Any) -> None:
        self.writes += 1
        super().__setitem__(key, value)


def test_deferred_writes_reach_the_table_once_per_key_with_the_last_value():
    table = WriteCountingTable({"gone": codec.dumps({"job_id": "gone"})})
    cache = TableCache(table, JobTopology, bound=1)  # a bound of one: reads must not fall back on the table
    with cache.deferred():
        for attempt in (1, 2, 3):
            cache.put("j1", JobTopology(job_id="j1", attempt=attempt))
        cache.put("j2", JobTopology(job_id="j2"))
        topo = cache.get("j1")
        assert topo is not None and topo.attempt == 3  # reads see the writes at once
        cache.drop("gone")
        assert table.writes == 0 and "gone" in table  # nothing written yet
        assert sorted(k for k, _ in cache.stored_items()) == ["j1", "j2"]  # what a timer would see
    assert table.writes == 2 and codec.loads(table["j1"])["attempt"] == 3
    assert "gone" not in table


def test_a_failure_inside_a_deferred_block_still_writes_what_was_done():
    table = WriteCountingTable()
    cache = TableCache(table, JobTopology, bound=8)
    try:
        with cache.deferred():
            cache.put("j1", JobTopology(job_id="j1"))
            raise RuntimeError("a bad signal")
    except RuntimeError:
        pass
    assert "j1" in table


class ChangelogTable(dict[str, Any]):
    """A dict standing in for a Faust table whose every write sends a changelog record through its
    public ``send_changelog`` (as Faust's ``on_key_set`` does), each delivered when the test says."""

    def __init__(self) -> None:
        super().__init__()
        self.deliveries: list[asyncio.Future[int]] = []

    def send_changelog(self, partition: int | None, key: Any, value: Any) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.deliveries.append(future)
        return future

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self.send_changelog(0, key, value)


async def test_acked_waits_for_each_changelog_record_written_since_the_last_call_and_returns_failures():
    table = ChangelogTable()
    cache = TableCache(table, JobTopology, bound=8)
    cache.track_acks()
    cache.track_acks()  # once is enough: a second call wraps nothing twice
    cache.put("j1", JobTopology(job_id="j1"))
    cache.put("j2", JobTopology(job_id="j2"))
    assert len(table.deliveries) == 2
    waiting = asyncio.ensure_future(cache.acked())
    await asyncio.sleep(0)
    table.deliveries[0].set_result(1)
    await asyncio.sleep(0)
    assert not waiting.done()  # the second write is not on the broker yet
    table.deliveries[1].set_exception(RuntimeError("NotEnoughReplicas"))
    failures = await waiting
    assert [str(f) for f in failures] == ["NotEnoughReplicas"]
    assert await cache.acked() == []  # nothing written since


async def test_forget_acks_drops_the_writes_nobody_waits_for():
    table = ChangelogTable()
    cache = TableCache(table, JobTopology, bound=8)
    cache.track_acks()
    cache.put("j1", JobTopology(job_id="j1"))
    cache.forget_acks()
    assert await asyncio.wait_for(cache.acked(), 1) == []
