"""Times written inside log lines: which prefixes give one, and which time wins."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.raw import LogLine
from streams.extract.extractor import Extractor
from streams.extract.timeparse import line_time_and_host, local_clock_time

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_dmesg_human_readable_prefix_gives_its_full_time():
    line = "[Fri Nov 13 21:09:18 2026] NVRM: Xid (PCI:0000:bd:00): 31, pid='479831', name='python3'"
    assert local_clock_time(line, NOW) == datetime(2026, 11, 13, 21, 9, 18, tzinfo=UTC)


def test_glog_prefixes_of_pytorch_and_torchrun_give_their_time_in_the_nearest_year():
    assert local_clock_time(
        "[rank3]:[E1107 02:44:10.600036839 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective", NOW
    ) == datetime(2026, 11, 7, 2, 44, 10, 600036, tzinfo=UTC)
    assert local_clock_time(
        "W1124 10:20:04.130538 304736 torch/distributed/run.py:793] ****", NOW
    ) == datetime(2026, 11, 24, 10, 20, 4, 130538, tzinfo=UTC)
    assert local_clock_time("I0101 00:00:01.5 12 train.cc:1] new year", NOW) == datetime(
        2027, 1, 1, 0, 0, 1, 500000, tzinfo=UTC
    )


def test_lines_that_only_look_like_a_prefix_give_no_time():
    for text in (
        "E1107 is the error code 12",
        "[E ProcessGroupNCCL.cpp:475] Some NCCL operations have failed",
        "[Fri Nov 13] not a time",
        "Epoch 0, global step 6600",
    ):
        assert local_clock_time(text, NOW) is None
    assert line_time_and_host("[Fri Nov 13 21:09:18 2026] NVRM: Xid", NOW) == (None, None)


def test_a_shippers_record_time_beats_a_zoneless_local_clock_prefix():
    text = "[Fri Nov 13 21:09:18 2026] NVRM: Xid (PCI:0000:bd:00): 79, pid=1, GPU has fallen off the bus."
    shipped = datetime(2026, 11, 13, 20, 9, 18, 500000, tzinfo=UTC)
    (with_record,) = Extractor().extract(
        LogLine(text=text, adapter="fluentbit", host="gpu-1", event_time=shipped), NOW
    )
    (file_only,) = Extractor().extract(LogLine(text=text, adapter="plain", host="gpu-1"), NOW)
    assert with_record.event_time == shipped
    assert file_only.event_time == datetime(2026, 11, 13, 21, 9, 18, tzinfo=UTC)


def test_pytorchs_unpadded_one_digit_month_is_read():
    assert local_clock_time(
        "[rank0]:[E704 13:48:58.120469 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog", NOW
    ) == (datetime(2026, 7, 4, 13, 48, 58, 120469, tzinfo=UTC))
