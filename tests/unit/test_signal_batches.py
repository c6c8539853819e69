"""Packing one job's signals into ``SignalBatch`` messages and taking them apart again."""

from __future__ import annotations

from datetime import timedelta

import pytest

from schemas import codec
from schemas.signals import MAX_SIGNALS_PER_BATCH, Signal, SignalBatch
from streams.extract.extractor import Extractor
from streams.extract.record import Outgoing, extract_record, hold_job_signals
from streams.signal_batches import BadBatch, pack, unpack
from tests.factories import T0, kernel_xid, nccl_timeout


def _signal(rank: int) -> Signal:
    [out] = extract_record(Extractor(), nccl_timeout("gpu-01", rank, "42", T0), "gpu-01", "raw", 0, rank, T0)
    assert isinstance(out.value, Signal)
    return out.value


def test_a_lone_signal_is_sent_as_itself():
    sig = _signal(0)
    assert pack("42", [sig]) == [sig]


def test_a_burst_is_packed_in_order_into_as_few_batches_as_the_bound_allows():
    sig = _signal(0)
    burst = [
        sig.model_copy(update={"rank": r, "signal_id": f"s{r}"}) for r in range(MAX_SIGNALS_PER_BATCH + 3)
    ]
    packed = pack("42", burst)
    assert [type(p) for p in packed] == [SignalBatch, SignalBatch]
    unpacked = [s for p in packed for s in unpack(codec.loads(codec.dumps(p)))]
    assert [s["rank"] for s in unpacked] == list(range(MAX_SIGNALS_PER_BATCH + 3))


def test_unpack_returns_a_plain_record_as_it_is_and_a_batch_as_its_signals():
    sig = codec.loads(codec.dumps(_signal(1)))
    assert unpack(sig) == [sig]
    assert unpack({"tick": True}) == [{"tick": True}]
    batch = codec.loads(codec.dumps(SignalBatch(job_id="42", signals=[_signal(1), _signal(2)])))
    assert [Signal.model_validate(s).rank for s in unpack(batch)] == [1, 2]


@pytest.mark.parametrize("signals", [None, "x", [], {"rank": 1}])
def test_a_batch_without_a_list_of_signals_is_refused(signals):
    with pytest.raises(BadBatch):
        unpack({"kind": "signal_batch", "job_id": "42", "signals": signals})


def test_a_batch_holds_at_least_one_and_at_most_the_bound_of_signals():
    with pytest.raises(ValueError):
        SignalBatch(job_id="42", signals=[])
    with pytest.raises(ValueError):
        SignalBatch(job_id="42", signals=[_signal(0)] * (MAX_SIGNALS_PER_BATCH + 1))


def test_job_signals_are_held_per_job_and_everything_else_is_sent_as_it_is():
    xid = extract_record(
        Extractor(), kernel_xid("gpu-03", 79, T0 + timedelta(seconds=1)), "gpu-03", "raw", 0, 9, T0
    )
    a, b = _signal(0), _signal(1)
    outs = [Outgoing("signals_job", b"42", a), *xid, Outgoing("signals_job", b"42", b)]
    by_job: dict[bytes, list[Signal]] = {}
    rest = hold_job_signals(outs, by_job)
    assert rest == xid and [o.dest for o in rest] == ["signals_node"]
    assert by_job == {b"42": [a, b]}
