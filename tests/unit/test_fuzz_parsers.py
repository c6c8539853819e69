"""Property tests: no input, however broken, makes the parsers raise anything but a clean refusal."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from schemas import codec
from schemas.raw import LogLine
from streams.diagnose.reader import ReadReport, read_lines
from streams.extract.carriers import strip_colours
from streams.extract.extractor import Extractor
from streams.extract.normalize import BadRecord, normalize
from streams.extract.timeparse import line_time_and_host

EXTRACTOR = Extractor()
NOW = datetime(2026, 11, 29, tzinfo=UTC)
FRAGMENTS = [
    "NVRM: Xid (PCI:",
    "0000:06:00): ",
    "79, ",
    "[Rank ",
    "] Watchdog caught collective operation timeout: ",
    "WorkNCCL(SeqNum=",
    "OpType=",
    "Timeout(ms)=",
    ") ran for ",
    "CUDA error: ",
    "sched: Allocate JobId=",
    "NodeList=gpu-[01-",
    "]",
    "Nov 29 10:00:00 ",
    "[2026-11-29T",
    "{",
    "}",
    '"log": ',
    "\x00",
    "\xff",
]
line_like = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), max_size=12).map("".join)
json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "log",
                    "message",
                    "line",
                    "schema_version",
                    "@timestamp",
                    "timestamp",
                    "host",
                    "hostname",
                    "kubernetes",
                    "file",
                    "job_id",
                    "time",
                ]
            )
            | st.text(max_size=8),
            children,
            max_size=5,
        )
    ),
    max_leaves=12,
)


@given(st.binary(max_size=2000))
def test_normalize_accepts_or_refuses_any_bytes_cleanly(data: bytes):
    try:
        line = normalize(data)
    except BadRecord as exc:
        assert exc.reason
    else:
        assert isinstance(line.text, str)


@given(json_like)
def test_normalize_accepts_or_refuses_any_json_value_cleanly(value):
    try:
        normalize(codec.dumps(value))
    except BadRecord as exc:
        assert exc.reason in {"empty", "invalid_json", "unknown_shape", "invalid_record"}


@given(line_like)
@example("NVRM: Xid (PCI:0000:06:00): 0\x1b@")  # an escape sequence the evidence leaves out
@settings(max_examples=300)
def test_extractor_never_raises_and_signals_are_valid(text: str):
    for s in EXTRACTOR.extract(LogLine(text=text, adapter="plain"), NOW):
        # the evidence is the line as read, terminal escapes taken off (``carriers.strip_colours``)
        assert s.text == strip_colours(text)[:4096]
        assert 0 <= s.weight <= 100


@given(line_like)
def test_line_time_parsing_never_raises(text: str):
    line_time_and_host(text, NOW)


@given(st.binary(max_size=5000))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=100)
def test_reader_reads_any_file_without_raising(tmp_path: Path, data: bytes):
    path = tmp_path / "fuzz.log"
    path.write_bytes(data)
    report = ReadReport()
    lines = list(read_lines([str(path)], report))
    assert report.files == 1
    assert all(b"\x00" not in line.data for line in lines)
