"""One sample record per shipper shape (docs/collectors.md), as each shipper writes it to Kafka."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from schemas import codec
from schemas.raw import LogLine
from streams.extract.normalize import BadRecord, normalize, normalize_all, split_cri

XID = "NVRM: Xid (PCI:0000:06:00): 79, pid=1234, GPU has fallen off the bus."


def _one(rec: dict[str, Any] | bytes, key_host: str | None = None) -> LogLine:
    raw = rec if isinstance(rec, bytes) else codec.dumps(rec)
    lines = normalize_all(raw, key_host)
    assert len(lines) == 1, lines
    return lines[0]


def test_filebeat_ecs_record_takes_node_pod_container_and_file_from_ecs_fields():
    rec = {
        "@timestamp": "2026-11-29T10:00:00.123Z",
        "@metadata": {"beat": "filebeat", "type": "_doc", "version": "8.15.0"},
        "message": "2026-11-29T10:00:00.123456789Z stderr F RuntimeError: CUDA error: an illegal memory access",
        "ecs": {"version": "8.0.0"},
        "agent": {"type": "filebeat", "name": "fb-abc"},
        "host": {"name": "fb-daemonset-pod"},
        "log": {"file": {"path": "/var/log/containers/w-3_ml_pytorch-abc.log"}, "offset": 42},
        "stream": "stderr",
        "input": {"type": "container"},
        "container": {"id": "abc123", "runtime": "containerd", "image": {"name": "nvcr.io/nvidia/pytorch"}},
        "kubernetes": {
            "pod": {"name": "llama-worker-3", "uid": "u-1"},
            "namespace": "ml",
            "node": {"name": "gpu-node-7"},
            "container": {"name": "pytorch"},
            "labels": {"training_kubeflow_org/job-name": "llama-70b"},
        },
    }
    line = _one(rec)
    assert line.adapter == "filebeat"
    assert line.text == "RuntimeError: CUDA error: an illegal memory access"
    assert (line.host, line.pod, line.namespace, line.container) == (
        "gpu-node-7",
        "llama-worker-3",
        "ml",
        "pytorch",
    )
    assert line.job_id == "llama-70b"  # Filebeat de-dots label keys
    assert line.file == "/var/log/containers/w-3_ml_pytorch-abc.log"
    assert line.event_time == datetime(2026, 11, 29, 10, 0, 0, 123000, tzinfo=UTC)


def test_filebeat_bare_metal_record_uses_host_name_and_slurm_output_path_for_the_job():
    rec = {
        "@timestamp": "2026-11-29T10:00:00Z",
        "message": "[rank3]: NCCL watchdog timeout",
        "host": {"name": "gpu-02", "hostname": "gpu-02"},
        "log": {"file": {"path": "/scratch/u/slurm-4711.out"}},
        "container": {"id": "deadbeef"},
    }
    line = _one(rec)
    assert (line.adapter, line.host, line.job_id, line.container) == (
        "filebeat",
        "gpu-02",
        "4711",
        "deadbeef",
    )


def test_otlp_json_batch_gives_one_line_per_log_record_with_resource_attributes():
    def attr(k: str, v: str) -> dict[str, Any]:
        return {"key": k, "value": {"stringValue": v}}

    rec = {
        "resourceLogs": [
            {
                "resource": {
                    "attributes": [
                        attr("k8s.pod.name", "trainer-0"),
                        attr("k8s.namespace.name", "ml"),
                        attr("k8s.node.name", "gpu-node-1"),
                        attr("k8s.container.name", "pytorch"),
                        attr("host.name", "collector-host"),
                        attr("k8s.pod.labels.training.kubeflow.org/job-name", "bert"),
                    ]
                },
                "scopeLogs": [
                    {
                        "scope": {"name": "filelog"},
                        "logRecords": [
                            {
                                "timeUnixNano": "1764410400000000000",
                                "body": {"stringValue": "NCCL WARN Net : Connection closed by remote peer"},
                                "attributes": [
                                    attr("log.iostream", "stderr"),
                                    attr("log.file.path", "/x.log"),
                                ],
                            },
                            {
                                "observedTimeUnixNano": "1764410401000000000",
                                "body": {"stringValue": "second"},
                            },
                        ],
                    }
                ],
            }
        ]
    }
    first, second = normalize_all(codec.dumps(rec))
    assert first.adapter == "otlp"
    assert first.text == "NCCL WARN Net : Connection closed by remote peer"
    assert (first.host, first.pod, first.namespace, first.container) == (
        "gpu-node-1",
        "trainer-0",
        "ml",
        "pytorch",
    )
    assert (first.stream, first.file, first.job_id) == ("stderr", "/x.log", "bert")
    assert first.event_time == datetime(2025, 11, 29, 10, 0, tzinfo=UTC)
    assert (second.text, second.host, second.event_time) == (
        "second",
        "gpu-node-1",
        datetime(2025, 11, 29, 10, 0, 1, tzinfo=UTC),
    )


def test_otlp_json_on_bare_metal_takes_host_name_and_a_slurm_job_attribute():
    rec = {
        "resourceLogs": [
            {
                "resource": {"attributes": [{"key": "host.name", "value": {"stringValue": "gpu-04"}}]},
                "scopeLogs": [
                    {
                        "logRecords": [
                            {
                                "body": {"stringValue": XID},
                                "attributes": [{"key": "slurm.job.id", "value": {"intValue": "812"}}],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    line = _one(rec)
    assert (line.host, line.job_id, line.text) == ("gpu-04", "812", XID)


def test_otlp_json_with_a_broken_structure_is_a_bad_record_not_a_crash():
    with pytest.raises(BadRecord) as info:
        normalize_all(codec.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": "nope"}]}]}))
    assert info.value.reason == "invalid_record"


def test_loki_push_body_gives_each_value_a_line_and_never_reads_the_scrape_job_as_a_batch_job():
    rec = {
        "streams": [
            {
                "stream": {
                    "job": "kubernetes-pods",
                    "namespace": "ml",
                    "pod": "w-1",
                    "container": "c",
                    "node_name": "gpu-9",
                },
                "values": [["1764410400000000000", "line one"], ["1764410400500000000", "line two"]],
            }
        ]
    }
    one, two = normalize_all(codec.dumps(rec))
    assert (one.adapter, one.host, one.pod, one.namespace, one.container) == (
        "loki",
        "gpu-9",
        "w-1",
        "ml",
        "c",
    )
    assert one.job_id is None
    assert two.text == "line two"


def test_rsyslog_jsonmesg_record_takes_hostname_and_reported_time():
    rec = {
        "msg": " NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.",
        "rawmsg": "<4>Nov 29 10:00:00 gpu-03 kernel: NVRM: Xid ...",
        "timereported": "2026-11-29T10:00:00.000000+00:00",
        "hostname": "gpu-03",
        "syslogtag": "kernel:",
        "programname": "kernel",
        "fromhost": "gpu-03",
        "syslogfacility": "0",
        "syslogseverity": "4",
    }
    line = _one(rec)
    assert line.adapter == "rsyslog"
    assert line.text.startswith("NVRM: Xid")
    assert (line.host, line.event_time) == ("gpu-03", datetime(2026, 11, 29, 10, tzinfo=UTC))


def test_rsyslog_rfc5424_line_gives_host_and_time_and_keeps_the_text():
    raw = b"<4>1 2026-11-29T10:00:00.5Z gpu-05 kernel - - - " + XID.encode()
    line = _one(raw, key_host="relay")
    assert (line.adapter, line.host) == ("plain", "gpu-05")
    assert line.event_time == datetime(2026, 11, 29, 10, 0, 0, 500000, tzinfo=UTC)
    assert line.text.endswith(XID)


def test_rsyslog_forward_format_line_with_rfc3339_time_names_the_host():
    raw = b"<27>2026-11-29T10:00:00.000001+00:00 gpu-06 slurmd[77]: error: something"
    line = _one(raw)
    assert (line.host, line.event_time) == ("gpu-06", datetime(2026, 11, 29, 10, 0, 0, 1, tzinfo=UTC))


def test_rsyslog_rfc3164_line_names_the_host_and_leaves_the_yearless_time_to_the_extractor():
    line = _one(b"<4>Nov 29 10:00:00 gpu-07 kernel: " + XID.encode(), key_host="relay")
    assert (line.host, line.event_time) == ("gpu-07", None)


def test_plain_line_without_a_syslog_header_takes_the_kafka_key_as_host():
    assert _one(b"[rank0]: hello", key_host="gpu-01").host == "gpu-01"


def test_fluentbit_record_whose_log_holds_several_cri_lines_joins_partials_into_whole_lines():
    log = (
        "2024-01-01T00:00:00.1Z stdout P RuntimeError: CUDA error: \n"
        "2024-01-01T00:00:00.2Z stderr F other stream line\n"
        "2024-01-01T00:00:00.3Z stdout F an illegal memory access was encountered\n"
    )
    a, b = normalize_all(codec.dumps({"log": log, "kubernetes": {"host": "gpu-1"}}))
    assert (a.text, a.stream) == ("other stream line", "stderr")
    assert (b.text, b.stream, b.host) == (
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "stdout",
        "gpu-1",
    )


def test_plain_record_of_cri_lines_is_split_and_joined():
    raw = b"2024-01-01T00:00:00.123456789Z stdout P abc\n2024-01-01T00:00:00.2Z stdout F def\n"
    assert [ln.text for ln in normalize_all(raw)] == ["abcdef"]


def test_a_multi_line_message_that_is_not_all_cri_stays_one_line():
    text = '2024-01-01T00:00:00Z stdout F Traceback (most recent call last):\n  File "x.py", line 1'
    assert split_cri(text) == [('Traceback (most recent call last):\n  File "x.py", line 1', "stdout")]


def test_sickbay_batch_record_becomes_one_line_each_with_the_files_job():
    rec = {
        "schema_version": 1,
        "lines": ["a", "b", "c"],
        "host": "gpu-01",
        "file": "/j/slurm-9.out",
        "line_no": 4,
    }
    lines = normalize_all(codec.dumps(rec))
    assert [(ln.text, ln.host, ln.job_id) for ln in lines] == [
        ("a", "gpu-01", "9"),
        ("b", "gpu-01", "9"),
        ("c", "gpu-01", "9"),
    ]


def test_single_line_normalize_refuses_a_multi_line_record_instead_of_dropping_lines():
    rec = {"schema_version": 1, "lines": ["a", "b"]}
    with pytest.raises(BadRecord) as info:
        normalize(codec.dumps(rec))
    assert info.value.reason == "multi_line_record"


def test_vector_kafka_sink_record_still_reads_as_vector():
    rec = {"message": XID, "timestamp": "2026-11-29T10:00:00Z", "host": "gpu-02", "source_type": "journald"}
    assert (_one(rec).adapter, _one(rec).host) == ("vector", "gpu-02")


@pytest.mark.parametrize(
    ("rec", "reason"),
    [
        ({"streams": [{"stream": {}, "values": [[1]]}]}, "invalid_record"),
        ({"resourceLogs": "x"}, "invalid_record"),
        ({"resourceLogs": []}, "empty"),
        ({"msg": 3}, "unknown_shape"),
        ({"message": "x", "host": {"name": 5}}, "invalid_record"),
    ],
)
def test_broken_shipper_records_are_dead_lettered_with_a_reason(rec, reason):
    with pytest.raises(BadRecord) as info:
        normalize_all(codec.dumps(rec))
    assert info.value.reason == reason


# Fluent Bit's systemd input (Systemd_Filter _TRANSPORT=kernel) through its kafka output, format json
JOURNAL_KERNEL = {
    "@timestamp": 1764410400.5,
    "PRIORITY": "4",
    "SYSLOG_FACILITY": "0",
    "SYSLOG_IDENTIFIER": "kernel",
    "_TRANSPORT": "kernel",
    "_BOOT_ID": "4f6cbd1e0a8e4a9d9b5d3c6a1e2f7b80",
    "_MACHINE_ID": "0b5e1c3f9d2a4e6b8c7d1f0a2b3c4d5e",
    "_HOSTNAME": "gpu-node-17",
    "_SOURCE_MONOTONIC_TIMESTAMP": "512345678",
    "_SOURCE_REALTIME_TIMESTAMP": "1764410399250000",
    "MESSAGE": XID,
}


def test_journal_entry_from_fluent_bits_systemd_input_names_its_host_and_the_kernels_own_time():
    line = _one(JOURNAL_KERNEL)
    assert (line.adapter, line.text, line.host) == ("journald", XID, "gpu-node-17")
    assert line.event_time == datetime(2025, 11, 29, 9, 59, 59, 250000, tzinfo=UTC)


@pytest.mark.parametrize("strip", [False, True])
def test_journal_entry_with_fluent_bits_lowercase_and_strip_underscores_reads_the_same(strip):
    renamed = {}
    for key, value in JOURNAL_KERNEL.items():
        name = key if key.startswith("@") else key.lower()
        renamed[name.lstrip("_") if strip else name] = value
    line = _one(renamed)
    assert (line.adapter, line.text, line.host) == ("journald", XID, "gpu-node-17")
    assert line.event_time == datetime(2025, 11, 29, 9, 59, 59, 250000, tzinfo=UTC)


def test_journal_entry_without_the_source_time_takes_fluent_bits_stamp_then_journalctls():
    rec = {k: v for k, v in JOURNAL_KERNEL.items() if k != "_SOURCE_REALTIME_TIMESTAMP"}
    assert _one(rec).event_time == datetime(2025, 11, 29, 10, 0, 0, 500000, tzinfo=UTC)
    exported = {"__REALTIME_TIMESTAMP": "1764410401000000", "_HOSTNAME": "gpu-node-17", "MESSAGE": XID}
    assert _one(exported).event_time == datetime(2025, 11, 29, 10, 0, 1, tzinfo=UTC)


def test_journalctl_json_byte_array_message_is_decoded_and_a_stray_byte_marked():
    rec = {"_HOSTNAME": "gpu-node-17", "MESSAGE": [*XID.encode(), 0xFF]}
    assert _one(rec).text == XID + "\ufffd"


def test_journal_entry_without_a_host_takes_the_kafka_key():
    rec = {"MESSAGE": XID, "_TRANSPORT": "kernel"}
    assert _one(rec, key_host="gpu-node-3").host == "gpu-node-3"


def test_a_lowercased_message_without_journal_fields_is_still_vectors():
    rec = {"message": XID, "syslog_identifier": "kernel", "timestamp": "2026-11-29T10:00:00Z"}
    assert _one(rec).adapter == "vector"


@pytest.mark.parametrize(
    "rec",
    [
        {"MESSAGE": None, "_HOSTNAME": "n1"},  # journalctl's null for a field too large to export
        {"MESSAGE": [72, 300], "_HOSTNAME": "n1"},  # no byte
        {"MESSAGE": "x", "_SOURCE_REALTIME_TIMESTAMP": "soon"},
        {"MESSAGE": "x", "@timestamp": 1e300},  # past any date
    ],
)
def test_a_broken_journal_entry_is_dead_lettered_as_invalid(rec):
    with pytest.raises(BadRecord) as info:
        normalize_all(codec.dumps(rec))
    assert info.value.reason == "invalid_record"


def test_fluent_bits_kmsg_record_reads_the_kernel_line_at_its_wall_clock_stamp():
    rec = {
        "@timestamp": 1764410400.25,
        "priority": 4,
        "sequence": 1814,
        "sec": 11706,  # since boot: never the line's time
        "usec": 732233,
        "msg": XID,
        "hostname": "gpu-node-17",
    }
    line = _one(rec)
    assert (line.adapter, line.text, line.host) == ("fluentbit", XID, "gpu-node-17")
    assert line.event_time == datetime(2025, 11, 29, 10, 0, 0, 250000, tzinfo=UTC)
    bare = {k: v for k, v in rec.items() if k != "hostname"}
    assert _one(bare, key_host="gpu-node-3").host == "gpu-node-3"


def test_an_rsyslog_record_is_not_taken_for_kmsg():
    rec = {"msg": XID, "hostname": "gpu-node-17", "syslogtag": "kernel:", "sec": "x"}
    assert _one(rec).adapter == "rsyslog"


def test_a_kmsg_record_past_any_date_is_dead_lettered_as_invalid():
    with pytest.raises(BadRecord) as info:
        normalize_all(codec.dumps({"msg": XID, "sequence": 1, "sec": 2, "@timestamp": 1e300}))
    assert info.value.reason == "invalid_record"


def test_vectors_native_json_codec_reads_as_the_log_event_inside():
    event = {"message": XID, "host": "gpu-02", "timestamp": "2026-11-29T10:00:00Z", "source_type": "journald"}
    line = _one({"log": event})
    assert (line.adapter, line.text, line.host) == ("vector", XID, "gpu-02")
    assert line.event_time == datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def test_a_filebeat_record_with_its_log_map_is_not_taken_for_a_native_json_event():
    rec = {"message": XID, "log": {"file": {"path": "/var/log/kern.log"}}, "host": {"name": "gpu-02"}}
    line = _one(rec)
    assert (line.adapter, line.host, line.file) == ("filebeat", "gpu-02", "/var/log/kern.log")
