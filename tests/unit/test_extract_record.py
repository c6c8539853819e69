"""``extract_record``: what one raw record becomes, the same for the Faust agent and the batched stage."""

from __future__ import annotations

from schemas import codec
from schemas.base import utcnow
from schemas.deadletter import DeadLetter
from schemas.signals import Signal
from schemas.telemetry import GpuTelemetry
from streams.extract.extractor import Extractor
from streams.extract.record import extract_record
from tests.factories import T0, kernel_xid, nccl_timeout
from tests.unit.test_telemetry_extract import metric

EX = Extractor()


def run(value: bytes, key: str | None = "gpu-01", offset: int = 7):
    return extract_record(EX, value, key, "raw.logs", 2, offset, utcnow())


def test_a_job_fact_goes_to_signals_job_keyed_by_the_job():
    [out] = run(nccl_timeout("gpu-01", 3, "42", T0))
    assert (out.dest, out.key) == ("signals_job", b"42")
    assert isinstance(out.value, Signal) and out.value.rank == 3


def test_a_node_fact_goes_to_signals_node_keyed_by_the_node():
    [out] = run(kernel_xid("gpu-03", 79, T0), key="gpu-03")
    assert (out.dest, out.key) == ("signals_node", b"gpu-03")
    assert isinstance(out.value, Signal) and out.value.rule == "gpu.xid"


def test_signal_ids_come_from_the_records_position_so_a_replay_repeats_them():
    a = run(kernel_xid("gpu-03", 79, T0), offset=7)
    b = run(kernel_xid("gpu-03", 79, T0), offset=7)
    c = run(kernel_xid("gpu-03", 79, T0), offset=8)
    ids = [o[0].value.signal_id for o in (a, b, c)]  # type: ignore[attr-defined]
    assert ids[0] == ids[1] != ids[2]


def test_a_line_no_rule_wants_sends_nothing():
    assert run(b"iteration 10 | loss 1.0 | nothing wrong") == []


def test_a_vector_metric_event_goes_to_raw_telemetry_keyed_by_its_node():
    [out] = run(metric(), key="ignored")
    assert out.dest == "raw_telemetry"
    assert isinstance(out.value, GpuTelemetry) and out.key == out.value.node.encode()


def test_an_unreadable_record_becomes_one_dead_letter_with_the_reason_and_its_position():
    [out] = run(b'{"log": "truncated', offset=11)
    assert (out.dest, out.key) == ("dlq", b"extract")
    letter = out.value
    assert isinstance(letter, DeadLetter)
    assert (letter.reason, letter.topic, letter.partition, letter.offset) == (
        "invalid_json",
        "raw.logs",
        2,
        11,
    )


def test_a_rule_that_raises_dead_letters_the_record_instead_of_stopping_the_stream(monkeypatch):
    ex = Extractor()

    def boom(*_a, **_k):
        raise ValueError("rule bug")

    monkeypatch.setattr(ex, "extract", boom)
    [out] = extract_record(ex, kernel_xid("gpu-03", 79, T0), "gpu-03", "raw.logs", 0, 1, utcnow())
    assert out.dest == "dlq"
    assert isinstance(out.value, DeadLetter) and out.value.reason == "extractor_error"
    assert "rule bug" in out.value.error
    assert codec.loads(codec.dumps(out.value))["stage"] == "extract"


def test_the_batched_stage_joins_with_the_workers_static_member_id_when_the_deploy_sets_one(monkeypatch):
    from streams.extract.batched import consumer_settings
    from streams.settings import Settings

    s = Settings(app_id="sickbay", kafka_bootstrap="k:9092")
    monkeypatch.delenv("CONSUMER_GROUP_INSTANCE_ID", raising=False)
    conf = consumer_settings(s)
    assert conf["group.id"] == "sickbay-extract" and "group.instance.id" not in conf
    assert conf["enable.auto.commit"] is False  # committed only after the sends are acknowledged
    monkeypatch.setenv("CONSUMER_GROUP_INSTANCE_ID", "sickbay-worker-2")
    assert consumer_settings(s)["group.instance.id"] == "sickbay-worker-2"


def test_a_diagnose_only_lead_is_not_sent_by_the_stream_but_diagnose_reads_it():
    from schemas.raw import LogLine

    line = '  File "/opt/app/train.py", line 88, in <module>'
    assert EX.catalog.by_id("framework.python_traceback").diagnose_only
    assert [s.rule for s in EX.extract(LogLine(text=line, adapter="plain"), T0)] == [
        "framework.python_traceback"
    ]
    assert run(codec.dumps({"log": line, "host": "gpu-01", "job_id": "42"})) == []
