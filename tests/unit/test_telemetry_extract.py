"""Vector metric events → GpuTelemetry (streams/extract/telemetry.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas import codec
from streams.extract.normalize import BadRecord
from streams.extract.telemetry import looks_like_metric, parse_metric, parse_timestamp

TAGS = {
    "gpu": "3",
    "UUID": "GPU-5f1c2d3e-0000-1111-2222-333344445555",
    "pci_bus_id": "00000000:3B:00.0",
    "device": "nvidia3",
    "modelName": "NVIDIA H100 80GB HBM3",
    "Hostname": "gpu-02",
    "DCGM_FI_DRIVER_VERSION": "550.54.15",
    "hpc_job": "4242",
}


def metric(
    name: str = "DCGM_FI_DEV_SM_CLOCK", kind: str = "gauge", value: object = 1980.0, **over: object
) -> bytes:
    obj: dict[str, object] = {
        "name": name,
        "tags": dict(TAGS),
        "timestamp": "2026-11-29T03:00:00.123456789Z",
        "kind": "absolute",
        kind: {"value": value},
    }
    obj.update(over)
    return codec.dumps(obj)


def test_a_dcgm_gauge_becomes_one_gpu_sample():
    s = parse_metric(metric(), key_host="ignored")
    assert s is not None
    assert (s.node, s.gpu, s.pci_bus_id, s.job_id, s.source) == (
        "gpu-02",
        3,
        "00000000:3B:00.0",
        "4242",
        "dcgm-exporter",
    )
    assert s.metrics == {"DCGM_FI_DEV_SM_CLOCK": 1980.0}
    assert s.time == datetime(2026, 11, 29, 3, 0, 0, 123456, tzinfo=UTC)


def test_a_counter_is_read_like_a_gauge():
    s = parse_metric(metric("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", kind="counter", value=12.0))
    assert s is not None and s.metrics == {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 12.0}


def test_native_json_wrapped_metric_is_read():
    wrapped = codec.dumps({"metric": codec.loads(metric())})
    s = parse_metric(wrapped)
    assert s is not None and s.gpu == 3


def test_the_simulators_vector_metric_record_is_read():
    from connectors.sources.simulator.events import Metric
    from connectors.sources.simulator.shippers import metric_event

    m = Metric(
        name="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        value=64.0,
        kind="gauge",
        gpu=5,
        uuid="GPU-1",
        pci_bus_id="00000000:86:00.0",
        model="NVIDIA H100",
        driver="550.54.15",
        hpc_job=None,
        pod="train-worker-1",
        namespace="ml",
    )
    s = parse_metric(codec.dumps(metric_event(m, "gpu-07", datetime(2026, 11, 29, tzinfo=UTC))))
    assert s is not None and (s.node, s.gpu, s.job_id) == ("gpu-07", 5, None)


def test_log_records_are_not_metrics():
    assert parse_metric(b'{"message": "gauge counter tags name", "host": "gpu-01"}') is None
    assert parse_metric(b"<4>Nov 29 03:00:00 gpu-01 kernel: NVRM: Xid") is None
    assert not looks_like_metric(b'{"log": "x", "hostname": "gpu-01"}')


def test_host_falls_back_to_the_instance_tag_then_the_record_key():
    tags = {k: v for k, v in TAGS.items() if k != "Hostname"}
    s = parse_metric(metric(tags={**tags, "instance": "gpu-09:9400"}))
    assert s is not None and s.node == "gpu-09"
    s = parse_metric(metric(tags=tags), key_host="gpu-11")
    assert s is not None and s.node == "gpu-11"


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (metric(kind="histogram"), "unsupported_metric"),
        (metric(value="fast"), "bad_metric"),
        (metric(value=None), "bad_metric"),
        (metric(tags={"instance": "node-exporter:9100", "Hostname": "gpu-02"}), "not_gpu_metric"),
        (metric(timestamp="yesterday"), "bad_timestamp"),
        (metric(tags={k: v for k, v in TAGS.items() if k != "Hostname"}), "no_host"),
    ],
)
def test_metric_events_that_cannot_be_gpu_samples_are_refused_with_a_reason(
    record: bytes, reason: str
) -> None:
    with pytest.raises(BadRecord) as err:
        parse_metric(record, key_host=None)
    assert err.value.reason == reason


def test_rfc3339_with_nanoseconds_and_offsets_is_utc():
    assert parse_timestamp("2026-11-29T04:00:00.5+01:00") == datetime(
        2026, 11, 29, 3, 0, 0, 500000, tzinfo=UTC
    )
    assert parse_timestamp("not a time") is None
