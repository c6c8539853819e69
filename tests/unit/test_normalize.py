from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas import codec
from streams.extract.normalize import MAX_RECORD_BYTES, BadRecord, normalize


def test_fluentbit_record_with_kubernetes_filter_takes_node_from_kubernetes_host():
    rec = {
        "@timestamp": 1764417600.25,
        "log": "2023-06-20T09:36:54.648112064Z stderr F RuntimeError: CUDA error: an illegal memory access\n",
        "stream": "stderr",
        "kubernetes": {
            "host": "gpu-node-7",
            "pod_name": "trainer-worker-3",
            "namespace_name": "ml",
            "container_name": "pytorch",
            "labels": {"training.kubeflow.org/job-name": "llama-70b"},
        },
    }
    line = normalize(codec.dumps(rec))
    assert line.adapter == "fluentbit"
    assert line.text == "RuntimeError: CUDA error: an illegal memory access"
    assert line.host == "gpu-node-7"
    assert line.job_id == "llama-70b"
    assert line.pod == "trainer-worker-3"
    assert line.event_time == datetime.fromtimestamp(1764417600.25, tz=UTC)


def test_fluentbit_tail_record_on_bare_metal_takes_job_from_slurm_output_name():
    rec = {
        "@timestamp": 1764417600.0,
        "log": "hello",
        "hostname": "gpu-02",
        "filename": "/scratch/u/slurm-4711.out",
    }
    line = normalize(codec.dumps(rec))
    assert (line.host, line.job_id, line.file) == ("gpu-02", "4711", "/scratch/u/slurm-4711.out")


def test_vector_kubernetes_logs_record_uses_pod_node_name():
    rec = {
        "message": "NCCL WARN x",
        "timestamp": "2026-11-29T10:00:00.123456789Z",
        "source_type": "kubernetes_logs",
        "host": "collector-pod",
        "kubernetes": {
            "pod_node_name": "gpu-node-9",
            "pod_namespace": "ml",
            "pod_name": "w-1",
            "container_name": "c",
        },
    }
    line = normalize(codec.dumps(rec))
    assert (line.adapter, line.host, line.namespace) == ("vector", "gpu-node-9", "ml")
    assert line.event_time == datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC)


def test_vector_host_source_record_uses_host_and_explicit_job_id():
    rec = {
        "message": "x",
        "timestamp": "2026-11-29T10:00:00Z",
        "host": "gpu-01",
        "source_type": "file",
        "file": "/var/log/kern.log",
        "job_id": 99,
    }
    line = normalize(codec.dumps(rec))
    assert (line.host, line.job_id, line.file) == ("gpu-01", "99", "/var/log/kern.log")


def test_plain_syslog_line_keeps_text_and_falls_back_to_the_kafka_key_for_host():
    line = normalize(
        b"Nov 29 10:00:00 gpu-03 kernel: NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.\n",
        key_host="gpu-03",
    )
    assert line.adapter == "plain"
    assert line.host == "gpu-03"
    assert line.text.endswith("fallen off the bus.")


def test_plain_line_with_invalid_utf8_is_kept_with_replacement_characters():
    line = normalize(b"kernel: bad byte \xff here")
    assert "\ufffd" in line.text


def test_sickbay_collector_record_round_trips():
    rec = {"schema_version": 1, "line": "x", "host": "h", "file": "/tmp/slurm-12.out", "line_no": 3}
    line = normalize(codec.dumps(rec))
    assert (line.adapter, line.host, line.job_id) == ("sickbay", "h", "12")


# (record, the reason it is refused), shared with test_literal_free_records.py
UNREADABLE = [
    (b"", "empty"),
    (b"   \n", "empty"),
    (b'{"log": "unterminated', "invalid_json"),
    (b'{"foo": 1, "bar": 2}', "unknown_shape"),
    (b'{"log": 42}', "unknown_shape"),
    (b'{"message": "x", "timestamp": "not a time"}', "invalid_record"),
    (b"\x00\x01\x02binary", "binary"),
    (b"x" * (MAX_RECORD_BYTES + 1), "too_large"),
]


@pytest.mark.parametrize(("raw", "reason"), UNREADABLE)
def test_unreadable_records_raise_bad_record_with_a_stable_reason(raw, reason):
    with pytest.raises(BadRecord) as info:
        normalize(raw)
    assert info.value.reason == reason
