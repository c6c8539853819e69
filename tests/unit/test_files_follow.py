"""`sickbay collect files` on real files: follow, rotation, truncation, globs, offsets across restarts.

The producer is a recorder that acknowledges records only when told to, so the tests
can check that offsets never move past a line whose record is not delivered yet.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from connectors.sources.files import CollectError, FileCollector
from schemas import codec
from streams.extract.normalize import normalize_all


class Recorder:
    """The slice of ReliableProducer a collector uses; ``auto_ack`` off holds deliveries back."""

    def __init__(self, auto_ack: bool = True) -> None:
        self.records: list[tuple[bytes | None, bytes]] = []
        self.auto_ack = auto_ack
        self.acked = 0
        self.spool = None
        self.mode = "direct"
        self.broker_down = False
        self.delivered = self.spooled = self.replayed = self.failed = 0
        self.last_error: str | None = None

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> int:
        self.records.append((key, value))
        if self.auto_ack:
            self.acked = len(self.records)
        return len(self.records)

    def poll(self, timeout_s: float = 0.0) -> None:
        return None

    def checkpoint(self) -> int:
        return self.acked

    def flush(self, timeout_s: float = 30.0) -> int:
        self.acked = len(self.records)
        self.delivered = len(self.records)
        return 0

    def lines(self) -> list[str]:
        return [ln.text for _, v in self.records for ln in normalize_all(v)]


def collector(rec: Recorder, patterns: list[str], tmp_path: Path, **kw: Any) -> FileCollector:
    kw.setdefault("offsets", tmp_path / "state" / "offsets.json")
    kw.setdefault("rotate_grace_s", 0.0)
    kw.setdefault("rescan_s", 0.0)
    return FileCollector(rec, "t.raw", patterns, host="gpu-01", **kw)  # type: ignore[arg-type]


def drain(c: FileCollector, rounds: int = 3) -> None:
    for _ in range(rounds):
        c.step()


def write(path: Path, *lines: str, mode: str = "a") -> None:
    with open(path, mode) as fh:
        fh.write("".join(f"{ln}\n" for ln in lines))


def test_plain_lines_are_wrapped_with_host_file_line_number_and_job(tmp_path):
    log = tmp_path / "slurm-4711.out"
    write(log, "first", "", "second")
    rec = Recorder()
    c = collector(rec, [str(log)], tmp_path)
    drain(c)
    wrapped = [codec.loads(v) for _, v in rec.records]
    assert [(w["line"], w["line_no"], w["job_id"], w["host"]) for w in wrapped] == [
        ("first", 1, "4711", "gpu-01"),
        ("second", 3, "4711", "gpu-01"),
    ]
    assert c.stats.skipped_empty == 1


def test_shipper_json_lines_are_forwarded_byte_for_byte_keyed_by_their_own_host(tmp_path):
    fluent = '{"@timestamp":1764417600.5,"log":"NVRM: Xid 79","hostname":"gpu-03"}'
    log = tmp_path / "x.log"
    write(log, "plain before", fluent, "plain after")
    rec = Recorder()
    drain(collector(rec, [str(log)], tmp_path))
    assert rec.records[1] == (b"gpu-03", fluent.encode())
    assert rec.lines() == ["plain before", "NVRM: Xid 79", "plain after"]


def test_a_line_that_merely_starts_with_a_brace_is_wrapped_as_a_plain_line(tmp_path):
    log = tmp_path / "train.log"
    write(log, "{'loss': 1.234, 'grad_norm': 0.5, 'epoch': 0.1}", '{"event": "no shipper shape"}')
    rec = Recorder()
    drain(collector(rec, [str(log)], tmp_path))
    assert [codec.loads(v)["line"] for _, v in rec.records] == [
        "{'loss': 1.234, 'grad_norm': 0.5, 'epoch': 0.1}",
        '{"event": "no shipper shape"}',
    ]


def test_follow_reads_appended_lines_and_holds_a_partial_line_until_it_ends(tmp_path):
    log = tmp_path / "a.log"
    write(log, "one")
    rec = Recorder()
    c = collector(rec, [str(log)], tmp_path)
    drain(c)
    with open(log, "a") as fh:
        fh.write("two\nthr")
    drain(c)
    assert rec.lines() == ["one", "two"]
    with open(log, "a") as fh:
        fh.write("ee\n")
    drain(c)
    assert rec.lines() == ["one", "two", "three"]


def test_rename_and_create_rotation_reads_the_rest_of_the_old_file_then_the_new_one(tmp_path):
    log = tmp_path / "app.log"
    write(log, "a1", "a2")
    rec = Recorder()
    c = collector(rec, [str(tmp_path / "*.log")], tmp_path, rotate_grace_s=0.2)
    drain(c)
    with open(log, "a") as old:
        os.rename(log, tmp_path / "app.log.1")
        write(log, "b1")
        old.write("a3 written after the rename\n")  # the writer still holds the old inode
        old.flush()
        drain(c)
    assert rec.lines() == ["a1", "a2", "a3 written after the rename", "b1"]  # the old file is finished first
    assert c.stats.rotations == 1


def test_a_rotated_file_is_closed_after_its_grace_period_and_collecting_goes_on(tmp_path):
    log = tmp_path / "app.log"
    write(log, "a1")
    rec = Recorder()
    c = collector(rec, [str(log)], tmp_path, rotate_grace_s=0.0, checkpoint_s=3600)
    drain(c)
    os.rename(log, tmp_path / "app.log.1")
    write(log, "b1")
    drain(c, 4)  # the old file is closed, then stepped over until a checkpoint drops it
    write(log, "b2")
    drain(c)
    assert rec.lines() == ["a1", "b1", "b2"]
    assert [r.state for r in c.report().reached if r.kind == "file"] == ["closed", "reading"]


def test_a_file_that_was_short_when_opened_is_fingerprinted_on_its_first_bytes_once_it_grows(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("")
    c = collector(Recorder(), [str(log)], tmp_path)
    drain(c)
    write(log, "x" * 300)
    drain(c)
    c.close()
    (entry,) = codec.loads((tmp_path / "state" / "offsets.json").read_bytes())["files"].values()
    assert entry["fp_len"] == 256


def test_copytruncate_rotation_starts_the_same_file_again_from_the_top(tmp_path):
    log = tmp_path / "app.log"
    write(log, "old-1", "old-2", "old-3")
    rec = Recorder()
    c = collector(rec, [str(log)], tmp_path)
    drain(c)
    (tmp_path / "app.log.1").write_bytes(log.read_bytes())  # copytruncate: copy, then truncate in place
    with open(log, "r+b") as fh:
        fh.truncate(0)
    write(log, "new-1")
    drain(c)
    assert rec.lines() == ["old-1", "old-2", "old-3", "new-1"]
    assert c.stats.truncations == 1


def test_a_glob_picks_up_files_created_after_the_collector_started(tmp_path):
    write(tmp_path / "a.log", "a")
    rec = Recorder()
    c = collector(rec, [str(tmp_path / "*.log")], tmp_path)
    drain(c)
    write(tmp_path / "b.log", "b")
    (tmp_path / "c.txt").write_text("not matched\n")
    drain(c)
    assert rec.lines() == ["a", "b"]


def test_a_restart_resumes_from_saved_offsets_without_losing_or_repeating_lines(tmp_path):
    log = tmp_path / "a.log"
    write(log, *[f"line {i}" for i in range(5)])
    first = Recorder()
    c = collector(first, [str(log)], tmp_path)
    drain(c)
    c.close()
    write(log, *[f"line {i}" for i in range(5, 8)])  # written while the collector was down
    second = Recorder()
    c2 = collector(second, [str(log)], tmp_path)
    drain(c2)
    c2.close()
    assert first.lines() + second.lines() == [f"line {i}" for i in range(8)]
    saved = codec.loads((tmp_path / "state" / "offsets.json").read_bytes())
    st = log.stat()
    entry = saved["files"][f"{st.st_dev}:{st.st_ino}"]  # keyed by device and inode
    assert (entry["pos"], entry["line_no"], entry["path"]) == (st.st_size, 8, str(log))


def test_offsets_advance_only_for_delivered_records(tmp_path):
    log = tmp_path / "a.log"
    write(log, "l1", "l2", "l3")
    rec = Recorder(auto_ack=False)
    c = collector(rec, [str(log)], tmp_path)
    drain(c)
    rec.acked = 2  # l3 is still in flight when the process dies
    c.checkpoint()
    saved = codec.loads((tmp_path / "state" / "offsets.json").read_bytes())
    (entry,) = saved["files"].values()
    assert entry["line_no"] == 2
    assert entry["pos"] == len(b"l1\nl2\n")
    again = Recorder()
    drain(collector(again, [str(log)], tmp_path))
    assert again.lines() == ["l3"]


def test_a_file_whose_first_bytes_changed_is_read_from_the_start_despite_a_saved_offset(tmp_path):
    log = tmp_path / "a.log"
    write(log, "original content line")
    c = collector(Recorder(), [str(log)], tmp_path)
    drain(c)
    c.close()
    with open(log, "r+b") as fh:  # same inode, other content (e.g. an inode reused after a delete)
        fh.write(b"REPLACED content line\nand more lines\n")
    rec = Recorder()
    drain(collector(rec, [str(log)], tmp_path))
    assert rec.lines() == ["REPLACED content line", "and more lines"]


def test_a_file_that_shrank_while_the_collector_was_down_is_read_again(tmp_path):
    log = tmp_path / "a.log"
    write(log, "aaaa", "bbbb", "cccc")
    c = collector(Recorder(), [str(log)], tmp_path)
    drain(c)
    c.close()
    with open(log, "r+b") as fh:
        fh.truncate(5)  # "aaaa\n": same first bytes, shorter than the saved offset
    write(log, "dd")
    rec = Recorder()
    drain(collector(rec, [str(log)], tmp_path))
    assert rec.lines() == ["aaaa", "dd"]


def test_from_end_skips_existing_content_but_reads_new_lines_and_new_files(tmp_path):
    write(tmp_path / "a.log", "old")
    with open(tmp_path / "a.log", "a") as fh:
        fh.write("being writ")  # a line in progress is read whole once it ends
    rec = Recorder()
    c = collector(rec, [str(tmp_path / "*.log")], tmp_path, from_end=True)
    drain(c)
    write(tmp_path / "a.log", "ten", "new")
    write(tmp_path / "b.log", "b from the start")
    drain(c)
    assert rec.lines() == ["being written", "new", "b from the start"]


def test_cri_partial_lines_are_joined_before_they_are_sent(tmp_path):
    log = tmp_path / "pod.log"
    write(
        log,
        "2024-01-01T00:00:00.100000000Z stdout P RuntimeError: CUDA error: ",
        "2024-01-01T00:00:00.200000000Z stdout P an illegal memory access ",
        "2024-01-01T00:00:00.300000000Z stdout F was encountered",
        "2024-01-01T00:00:00.400000000Z stderr F next",
    )
    rec = Recorder()
    c = collector(rec, [str(log)], tmp_path)
    drain(c)
    assert rec.lines() == ["RuntimeError: CUDA error: an illegal memory access was encountered", "next"]
    assert c.stats.cri_joined == 1


def test_a_restart_inside_an_unfinished_cri_line_sends_the_whole_line_once(tmp_path):
    log = tmp_path / "pod.log"
    write(log, "2024-01-01T00:00:00Z stdout F before", "2024-01-01T00:00:01Z stdout P half ")
    first = Recorder()
    c = collector(first, [str(log)], tmp_path)
    drain(c)
    c.close()
    write(log, "2024-01-01T00:00:02Z stdout F and the rest")
    second = Recorder()
    drain(collector(second, [str(log)], tmp_path))
    assert first.lines() == ["before"]
    assert second.lines() == ["half and the rest"]


def test_batched_records_carry_consecutive_lines_and_normalise_back_to_them(tmp_path):
    log = tmp_path / "slurm-9.out"
    write(log, *[f"l{i}" for i in range(10)])
    rec = Recorder()
    c = collector(rec, [str(log)], tmp_path, lines_per_record=4)
    drain(c)
    assert [len(codec.loads(v)["lines"]) for _, v in rec.records] == [4, 4, 2]
    assert rec.lines() == [f"l{i}" for i in range(10)]
    assert {ln.job_id for _, v in rec.records for ln in normalize_all(v)} == {"9"}


def test_batching_gives_the_same_lines_in_the_same_order_as_one_line_per_record(tmp_path):
    fluent = '{"log":"NVRM: Xid 79","hostname":"gpu-03"}'
    lines = [
        *[f"plain {i}" for i in range(5)],
        fluent,
        "{'loss': 1.0}",
        "",
        "2024-01-01T00:00:00Z stdout P part one ",
        "plain 5",
        "2024-01-01T00:00:01Z stdout F part two",
        "crlf line\r",
        *[f"plain {i}" for i in range(6, 12)],
        fluent,
    ]
    log = tmp_path / "mixed.log"
    write(log, *lines)
    outputs = []
    for n in (1, 3):
        rec = Recorder()
        c = collector(rec, [str(log)], tmp_path, lines_per_record=n, offsets=None)
        drain(c)
        c.close()
        outputs.append(rec.lines())
    assert outputs[0] == outputs[1]
    assert "part one part two" in outputs[1] and "crlf line" in outputs[1]
    assert outputs[1].count("NVRM: Xid 79") == 2


def test_batched_records_stay_under_the_record_byte_cap_and_skip_empty_lines(tmp_path):
    log = tmp_path / "a.log"
    write(log, *[("x" * 100 if i % 5 else "") for i in range(40)])
    rec = Recorder()
    c = collector(rec, [str(log)], tmp_path, lines_per_record=64, max_record_bytes=1000)
    drain(c)
    c.close()
    sizes = [len(codec.loads(v)["lines"]) for _, v in rec.records]
    assert sum(sizes) == 32 and max(sizes) <= 10
    assert c.stats.skipped_empty == 8
    saved = codec.loads((tmp_path / "state" / "offsets.json").read_bytes())
    (entry,) = saved["files"].values()
    assert entry["line_no"] == 40 and entry["pos"] == log.stat().st_size


def test_a_line_over_one_mebibyte_is_skipped_and_counted_and_reading_goes_on(tmp_path):
    log = tmp_path / "a.log"
    with open(log, "wb") as fh:
        fh.write(b"before\n" + b"x" * (3 << 20) + b"\nafter\n")
    rec = Recorder()
    c = collector(rec, [str(log)], tmp_path)
    drain(c, 6)
    assert rec.lines() == ["before", "after"]
    assert c.stats.skipped_oversize == 1


def test_the_report_names_unmatched_patterns_skipped_compressed_files_and_the_broker_state(tmp_path):
    write(tmp_path / "a.log", "a")
    (tmp_path / "old.log.gz").write_bytes(b"\x1f\x8b")
    rec = Recorder()
    c = collector(rec, [str(tmp_path / "*.log*"), str(tmp_path / "missing-*.log")], tmp_path)
    drain(c)
    rep = c.report()
    assert rep.unmatched == [str(tmp_path / "missing-*.log")]
    states = {(r.kind, r.target): (r.ok, r.state) for r in rep.reached}
    assert states[("file", str(tmp_path / "a.log"))] == (True, "reading")
    assert states[("file", str(tmp_path / "old.log.gz"))] == (False, "skipped")
    assert states[("broker", "t.raw")] == (True, "direct")
    assert rep.counts["lines"] == 1


def test_an_unreadable_offsets_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "offsets.json"
    bad.write_text("{not json")
    with pytest.raises(CollectError, match=r"offsets file .* is unreadable"):
        collector(Recorder(), [str(tmp_path / "*.log")], tmp_path, offsets=bad)
