"""A record in whose bytes no rule literal occurs is only checked, not read into lines
(``Prefilter.records_with_literals`` + ``vet_without_lines``): the extract stage must send exactly
what the full read sends, dead letters included."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from connectors.sources.simulator import SimOptions, background_records, generate
from connectors.sources.simulator.output import iter_records
from connectors.sources.simulator.shippers import Shipping
from schemas import codec
from streams.extract.extractor import Extractor
from streams.extract.normalize import BadRecord, normalize_all, vet_without_lines
from streams.extract.prefilter import Prefilter, available_backends
from streams.extract.record import Outgoing, extract_record, sends_nothing, texts_within
from streams.extract.rules import load_catalog
from tests.unit.test_normalize import UNREADABLE

CATALOG = load_catalog()
EX = Extractor(CATALOG)
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def sent(outs: list[Outgoing]) -> list[tuple[str, bytes, dict[str, object]]]:
    """What goes out, without a dead letter's wall-clock time."""
    return [(o.dest, o.key, o.value.model_dump(exclude={"time"})) for o in outs]


def simulated_records() -> list[tuple[bytes, bytes]]:
    """Every shipper shape the simulator writes (Fluent Bit, Vector, Filebeat, rsyslog, OTLP, Loki,
    plain, Kubernetes Events), healthy background and faults."""
    out: list[tuple[bytes, bytes]] = []
    for index, name in enumerate(
        ["xid79_fallen_off_bus", "app_cuda_oom", "ib_port_flapping", "infra_preemption", "hang_no_error"]
    ):
        sc = generate(name, index, t0=NOW, options=SimOptions(telemetry_every_s=0.0, k8s_share=0.5))
        out += [(r.key, r.value) for r in iter_records(sc.events, Shipping(index))]
    for seed in range(3):
        nodes = [f"bn{seed}{k}" for k in range(4)]
        out += [(nodes[0].encode(), v) for v in background_records(seed, nodes, str(7000 + seed), 60, t0=NOW)]
    return out


@pytest.mark.parametrize("backend", available_backends())
def test_the_batch_scan_marks_exactly_the_records_a_per_record_scan_finds(backend):
    pf = Prefilter.from_catalog(CATALOG, backend)
    values = [v for _, v in simulated_records()]
    values += [
        b"",
        b"no literal here\nnor here",
        b"first line\nNVRM: Xid (PCI:0000:06:00): 79, pid=1",
        b"\n\n",
    ]
    marked = pf.records_with_literals(values)
    assert marked == [bool(pf.literal_ids(v)) for v in values]
    assert any(marked) and not all(marked)
    assert pf.records_with_literals([]) == []


# Records whose lines are not pieces of their bytes, each with a literal: the stage must not trust
# the bytes' literals for them (a JSON escape, colours splitting a literal, CRI pieces joined across
# lines, an Event's JSON re-encoded), and a plain one that it may trust.
UNTRUSTED = [
    codec.dumps({"log": "NVRM: Xid (PCI:0000:06:00): 79, pid=1\tGPU has fallen off the bus.", "time": 1.5}),
    b"\x1b[31mNVRM: X\x1b[0mid (PCI:0000:06:00): 79, pid=1, GPU has fallen off the bus.",
    b"2026-11-29T12:00:00Z stderr P RuntimeError: CUDA error: out of \n2026-11-29T12:00:01Z stderr F memory",
    codec.dumps(
        {
            "kind": "Event",
            "apiVersion": "v1",
            "reason": "BackOff",
            "type": "Warning",
            "message": "Back-off restarting failed container trainer",
            "involvedObject": {"kind": "Pod", "name": "train-0", "namespace": "ml"},
        }
    ),
    b"[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
]


def test_records_send_the_same_with_the_literals_the_batch_scan_found_as_a_full_read():
    """The stage hands each record the literals the batch scan found in its bytes: none (only
    checked) or some (rules chosen among theirs where the lines are pieces of the bytes)."""
    records = simulated_records() + [(b"n1", v) for v in UNTRUSTED]
    found = CATALOG.prefilter.record_literals([v for _, v in records])
    skipped = hinted = 0
    for offset, ((key, value), literals) in enumerate(zip(records, found, strict=True)):
        full = extract_record(EX, value, key.decode(), "raw.logs", 0, offset, NOW)
        fast = extract_record(EX, value, key.decode(), "raw.logs", 0, offset, NOW, literals=literals)
        assert sent(fast) == sent(full), value
        skipped += not literals
        hinted += bool(literals) and texts_within(value)
    assert skipped > len(records) // 3  # most healthy chatter carries no literal
    assert hinted > 100
    assert all(CATALOG.prefilter.literal_ids(v) for v in UNTRUSTED)
    assert [texts_within(v) for v in UNTRUSTED] == [False, False, False, True, True]


def test_the_literals_of_a_batch_are_each_records_own():
    pf = CATALOG.prefilter
    values = [v for _, v in simulated_records()] + UNTRUSTED + [b"", b"\n"]
    assert pf.record_literals(values) == [pf.literal_ids(v) for v in values]


def test_a_record_the_stage_skips_is_one_the_full_read_sends_nothing_for():
    """The batched stage skips the full call for literal-free records ``sends_nothing`` vouches for:
    each must be one the full read sends nothing for, and most of the healthy chatter must be such."""
    records = simulated_records()
    marked = CATALOG.prefilter.records_with_literals([v for _, v in records])
    skipped = 0
    for offset, ((key, value), literal) in enumerate(zip(records, marked, strict=True)):
        if literal or not sends_nothing(value):
            continue
        assert extract_record(EX, value, key.decode(), "raw.logs", 0, offset, NOW) == [], value
        skipped += 1
    assert skipped > len(records) // 3


@pytest.mark.parametrize(("raw", "reason"), UNREADABLE)
def test_a_bad_record_is_left_to_the_full_read_that_dead_letters_it(raw, reason):
    assert sends_nothing(raw) is False
    (out,) = extract_record(EX, raw, None, "raw.logs", 0, 7, NOW, literals=())
    assert out.dest == "dlq" and out.value.reason == reason


def test_a_metric_event_is_never_skipped():
    metric = codec.dumps(
        {
            "name": "DCGM_FI_DEV_GPU_TEMP",
            "kind": "absolute",
            "tags": {"gpu": "0", "Hostname": "n1"},
            "gauge": {"value": 71.0},
            "timestamp": "2026-11-29T12:00:00Z",
        }
    )
    assert sends_nothing(metric) is False
    assert [o.dest for o in extract_record(EX, metric, "n1", "raw.logs", 0, 1, NOW, literals=())] == [
        "raw_telemetry"
    ]


@pytest.mark.parametrize(("raw", "reason"), UNREADABLE)
def test_a_bad_record_without_a_literal_is_refused_for_the_same_reason(raw, reason):
    with pytest.raises(BadRecord) as info:
        vet_without_lines(raw)
    assert info.value.reason == reason


@pytest.mark.parametrize("raw", [b"[1, 2]", b"plain text", b'{"log": "fine", "time": 1796000000.5}'])
def test_a_record_the_full_read_accepts_passes_the_check(raw):
    assert normalize_all(raw)  # the full read accepts it (a "[" record is plain text)
    assert vet_without_lines(raw) is True


def test_a_fluent_bit_time_no_clock_can_hold_fails_both_ways_alike():
    raw = codec.dumps({"log": "hello", "time": 1e300})
    with pytest.raises((OverflowError, ValueError, OSError)):
        normalize_all(raw)
    with pytest.raises((OverflowError, ValueError, OSError)):
        vet_without_lines(raw)
    [out] = extract_record(EX, raw, "h", "raw.logs", 0, 1, NOW, literals=())
    assert out.dest == "dlq" and out.value.reason == "extractor_error"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "raw",
    [
        # a JSON escape can hide a literal's bytes that the decoded text holds
        codec.dumps({"log": "NVRM: Xid (PCI:0000:06:00): 79, pid=1"}).replace(b"Xid", b"\\u0058id"),
        # CRI partial pieces are joined across lines
        b"2026-11-29T10:00:00.1Z stderr P NVRM: X\n2026-11-29T10:00:00.2Z stderr F id (PCI:0000:06:00): 79, pid=1",
        # an Event's line is its re-encoded JSON; OTLP and Loki bodies are taken apart
        codec.dumps(
            {"kind": "Event", "apiVersion": "v1", "reason": "x", "message": "y", "involvedObject": {}}
        ),
        codec.dumps({"resourceLogs": []}),
        codec.dumps({"streams": []}),
    ],
)
def test_records_whose_bytes_cannot_vouch_for_their_lines_are_read_whole(raw):
    assert vet_without_lines(raw) is False
    assert sent(extract_record(EX, raw, "h", "raw.logs", 0, 1, NOW, literals=())) == sent(
        extract_record(EX, raw, "h", "raw.logs", 0, 1, NOW)
    )


def test_a_literal_split_by_a_cri_partial_line_still_fires_its_rule():
    raw = b"2026-11-29T10:00:00.1Z stderr P NVRM: X\n2026-11-29T10:00:00.2Z stderr F id (PCI:0000:06:00): 79, pid=1"
    assert not CATALOG.prefilter.records_with_literals([raw])[0]  # no literal in the bytes
    outs = extract_record(EX, raw, "h", "raw.logs", 0, 1, NOW, literals=())
    assert [o.value.rule for o in outs] == ["gpu.xid"]  # type: ignore[attr-defined]


XID_LINE = "NVRM: Xid (PCI:0000:06:00): 79, pid=1, GPU has fallen off the bus."


@pytest.mark.parametrize(
    "extra",
    [
        {},  # no literal anywhere in the bytes: the record must not be skipped as literal-free
        {"_CMDLINE": "df: No space left on device"},  # another field's literal must not pick the rules
    ],
)
def test_a_journal_entry_exported_as_a_byte_array_is_read_whole(extra):
    """``journalctl -o json`` exports a message that is not UTF-8 as an array of byte values: its
    literals are numbers in the record's bytes, so neither the skip nor the hint may trust them."""
    value = codec.dumps({"_HOSTNAME": "gpu-node-17", "MESSAGE": [*XID_LINE.encode(), 0xFF], **extra})
    literals = CATALOG.prefilter.record_literals([value])[0]
    assert bool(literals) is bool(extra)
    assert sends_nothing(value) is False
    full = extract_record(EX, value, None, "raw.logs", 0, 1, NOW)
    fast = extract_record(EX, value, None, "raw.logs", 0, 1, NOW, literals=literals)
    assert sent(fast) == sent(full)
    assert [(o.value.rule, o.value.node) for o in full] == [("gpu.xid", "gpu-node-17")]


def test_a_journal_entry_in_text_is_skipped_or_hinted_like_any_other_record():
    calm = codec.dumps({"_HOSTNAME": "gpu-node-17", "_TRANSPORT": "kernel", "MESSAGE": "usb 1-1: new device"})
    assert CATALOG.prefilter.record_literals([calm])[0] == () and sends_nothing(calm) is True
    xid = codec.dumps({"_HOSTNAME": "gpu-node-17", "_TRANSPORT": "kernel", "MESSAGE": XID_LINE})
    literals = CATALOG.prefilter.record_literals([xid])[0]
    fast = extract_record(EX, xid, None, "raw.logs", 0, 2, NOW, literals=literals)
    assert texts_within(xid) and [o.value.rule for o in fast] == ["gpu.xid"]
