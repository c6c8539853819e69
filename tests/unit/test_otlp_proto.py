"""OTLP logs in protobuf (the OTel Collector's and Alloy's Kafka exporters' default ``otlp_proto``)
read like their JSON encoding: one line per log record, with the resource's node, pod and job."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.protobuf.json_format import MessageToDict, MessageToJson
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, LogsData, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from schemas import codec
from streams.extract.extractor import Extractor
from streams.extract.normalize import BadRecord, normalize_all
from streams.extract.otlp_proto import otlp_proto_logs
from streams.extract.record import extract_record, sends_nothing
from streams.extract.rules import load_catalog

XID = "NVRM: Xid (PCI:0000:06:00): 79, pid=1234, GPU has fallen off the bus."
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CATALOG = load_catalog()
EX = Extractor(CATALOG)


def _kv(key: str, value: str | int) -> KeyValue:
    any_value = AnyValue(string_value=value) if isinstance(value, str) else AnyValue(int_value=value)
    return KeyValue(key=key, value=any_value)


def _logs(*records: LogRecord, resource: dict[str, str | int] | None = None) -> LogsData:
    attrs = resource if resource is not None else {"k8s.node.name": "gpu-node-1", "k8s.pod.name": "trainer-0"}
    return LogsData(
        resource_logs=[
            ResourceLogs(
                resource=Resource(attributes=[_kv(k, v) for k, v in attrs.items()]),
                scope_logs=[ScopeLogs(log_records=list(records))],
            )
        ]
    )


def test_a_protobuf_batch_gives_one_line_per_log_record_with_the_resources_node_and_pod():
    data = _logs(
        LogRecord(
            time_unix_nano=1_764_410_400_000_000_000,
            body=AnyValue(string_value="NCCL WARN Net : Connection closed by remote peer"),
            attributes=[_kv("log.iostream", "stderr"), _kv("log.file.path", "/x.log")],
        ),
        LogRecord(observed_time_unix_nano=1_764_410_401_000_000_000, body=AnyValue(string_value="second")),
    )
    first, second = normalize_all(data.SerializeToString())
    assert (first.adapter, first.text, first.host, first.pod) == (
        "otlp",
        "NCCL WARN Net : Connection closed by remote peer",
        "gpu-node-1",
        "trainer-0",
    )
    assert (first.stream, first.file) == ("stderr", "/x.log")
    assert first.event_time == datetime(2025, 11, 29, 10, 0, tzinfo=UTC)
    assert (second.text, second.event_time) == ("second", datetime(2025, 11, 29, 10, 0, 1, tzinfo=UTC))


def test_protobuf_and_json_encodings_of_the_same_logs_read_the_same():
    data = _logs(
        LogRecord(time_unix_nano=1_764_410_400_000_000_000, body=AnyValue(string_value=XID)),
        LogRecord(
            body=AnyValue(kvlist_value=KeyValueList(values=[_kv("msg", "structured")])),
            attributes=[_kv("slurm.job.id", 812)],
        ),
        resource={"host.name": "gpu-04"},
    )
    assert normalize_all(data.SerializeToString()) == normalize_all(MessageToJson(data).encode())


def test_a_protobuf_record_is_read_whole_by_the_stage_and_its_xid_found():
    """Its bytes hold NULs and newlines, and its literals (never trusted: not a text line): the
    stage's literal-free skip must not drop it, and its Xid must reach signals.node."""
    value = _logs(
        LogRecord(time_unix_nano=1_764_410_400_000_000_000, body=AnyValue(string_value=XID)),
        resource={"host.name": "gpu-04"},
    ).SerializeToString()
    assert b"\x00" in value and sends_nothing(value) is False
    literals = CATALOG.prefilter.record_literals([value])[0]
    outs = extract_record(EX, value, None, "raw.logs", 0, 3, NOW, literals=literals)
    assert [(o.dest, o.value.rule, o.value.node) for o in outs] == [("signals_node", "gpu.xid", "gpu-04")]
    for empty in ((), None):
        again = extract_record(EX, value, None, "raw.logs", 0, 3, NOW, literals=empty)
        assert [o.value.rule for o in again] == ["gpu.xid"]


@pytest.mark.parametrize("text", [b"\nplain text after a blank line", b"\n\nNCCL WARN something"])
def test_text_that_starts_with_a_newline_is_still_a_text_line(text):
    assert otlp_proto_logs(text) is None
    (line,) = normalize_all(text)
    assert line.adapter == "plain" and line.text == text.decode()


def test_a_broken_json_record_after_a_newline_is_still_dead_lettered_as_json():
    assert otlp_proto_logs(b"\n{not json") is None
    with pytest.raises(BadRecord) as info:
        normalize_all(b"\n{not json")
    assert info.value.reason == "invalid_json"


def test_a_protobuf_record_without_a_log_record_is_refused_as_binary_not_read_as_text():
    empty = LogsData(resource_logs=[ResourceLogs(resource=Resource(attributes=[_kv("host.name", "n1")]))])
    value = empty.SerializeToString() + b"\x00"
    assert otlp_proto_logs(value) is None
    with pytest.raises(BadRecord) as info:
        normalize_all(value)
    assert info.value.reason == "binary"


def test_a_protobuf_record_whose_records_have_no_body_is_an_empty_record():
    value = _logs(LogRecord(time_unix_nano=1)).SerializeToString()
    with pytest.raises(BadRecord) as info:
        normalize_all(value)
    assert info.value.reason == "empty"


def test_a_json_time_past_any_date_keeps_the_line_without_a_time():
    """A fixed64 reaches 2554 at most; OTLP JSON's string of digits can reach past year 9999."""
    data = _logs(LogRecord(body=AnyValue(string_value=XID)))
    obj = MessageToDict(data)
    obj["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["timeUnixNano"] = str(10**30)
    (line,) = normalize_all(codec.dumps(obj))
    assert (line.text, line.event_time) == (XID, None)
