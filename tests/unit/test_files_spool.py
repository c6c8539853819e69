"""The collector's local spool: append-only segments, read back in order, acknowledged, cleaned up."""

from __future__ import annotations

import time

import pytest

from connectors.kafka import ReliableProducer
from connectors.sources.spool import Spool, SpoolError


def _values(spool: Spool) -> list[bytes]:
    return [e.value for e in spool.entries(spool.acked)]


def test_entries_come_back_in_the_order_they_were_appended_across_segments(tmp_path):
    spool = Spool(tmp_path, segment_bytes=64)
    for i in range(20):
        spool.append("t.raw", b"gpu-01" if i % 2 else None, f"value-{i}".encode())
    entries = list(spool.entries(spool.acked))
    assert [e.value for e in entries] == [f"value-{i}".encode() for i in range(20)]
    assert [e.key for e in entries[:2]] == [None, b"gpu-01"]
    assert {e.topic for e in entries} == {"t.raw"}
    assert len(list(tmp_path.glob("*.spool"))) > 1
    assert spool.depth == 20


def test_a_reopened_spool_still_holds_what_was_not_acknowledged(tmp_path):
    spool = Spool(tmp_path)
    ends = [spool.append("t", None, f"v{i}".encode()) for i in range(5)]
    spool.ack(ends[1], 2)
    spool.close()
    again = Spool(tmp_path)
    assert _values(again) == [b"v2", b"v3", b"v4"]
    assert again.depth == 3


def test_a_torn_last_entry_is_cut_off_and_appends_continue_after_the_good_ones(tmp_path):
    spool = Spool(tmp_path)
    spool.append("t", None, b"whole")
    spool.close()
    (seg,) = tmp_path.glob("*.spool")
    with open(seg, "ab") as fh:
        fh.write(b"\x00\x00\x00\x40\x12")  # a crash in the middle of the next append
    again = Spool(tmp_path)
    again.append("t", None, b"next")
    assert _values(again) == [b"whole", b"next"]


def test_acknowledging_everything_removes_the_segments(tmp_path):
    spool = Spool(tmp_path, segment_bytes=32)
    ends = [spool.append("t", None, b"x" * 20) for _ in range(4)]
    spool.ack(ends[-1], 4)
    spool.commit()
    assert list(tmp_path.glob("*.spool")) == []
    assert spool.depth == 0
    spool.append("t", None, b"after")
    assert _values(spool) == [b"after"]
    assert _values(Spool(tmp_path)) == [b"after"]


def test_fully_acknowledged_old_segments_are_deleted_while_newer_ones_stay(tmp_path):
    spool = Spool(tmp_path, segment_bytes=32)
    ends = [spool.append("t", None, b"y" * 20) for _ in range(4)]
    spool.ack(ends[1], 2)
    spool.commit()
    spool.sync()
    assert _values(Spool(tmp_path)) == [b"y" * 20, b"y" * 20]
    assert not (tmp_path / f"{1:016d}.spool").exists()
    assert (tmp_path / f"{4:016d}.spool").exists()


def test_an_unusable_spool_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SpoolError, match="cannot create spool directory"):
        Spool(blocker / "spool")


def test_with_no_broker_at_all_every_record_lands_in_the_spool_in_order_and_counts_as_done(tmp_path):
    producer = ReliableProducer("127.0.0.1:1", "unit-spool", spool=Spool(tmp_path / "spool"))
    tickets = [producer.send("t.raw", f"r{i}".encode(), b"gpu-01") for i in range(50)]
    deadline = time.monotonic() + 20
    while producer.mode != "spooling" and time.monotonic() < deadline:
        producer.poll(0.2)
    tickets += [producer.send("t.raw", f"r{i}".encode(), b"gpu-01") for i in range(50, 60)]
    assert producer.mode == "spooling"
    assert producer.flush(2.0) == 0  # nothing left only in memory
    assert producer.checkpoint() == tickets[-1]
    reopened = Spool(tmp_path / "spool")
    assert [e.value for e in reopened.entries(reopened.acked)] == [f"r{i}".encode() for i in range(60)]
    assert {e.key for e in reopened.entries(reopened.acked)} == {b"gpu-01"}
