"""Faust agent ``extract``: raw.logs → signals.node / signals.job, unreadable records → dlq.

The per-message path, kept for in-memory tests (``agent.test_context``) and as the fallback
``SICKBAY_EXTRACT_STAGE=agent``; a worker on a broker runs the batched stage (``batched.py``) by
default. Both call :func:`~streams.extract.record.extract_record`.
"""

from __future__ import annotations

from typing import Any

from schemas.base import utcnow
from schemas.signals import Signal
from streams.extract.extractor import Extractor
from streams.extract.quiet import RepeatQuieter
from streams.extract.record import DESTINATIONS, extract_record, hold_job_signals
from streams.pipeline import Pipeline, key_str
from streams.signal_batches import pack_jobs


def register(pipe: Pipeline) -> None:
    app = pipe.app
    extractor = Extractor()
    quieter = RepeatQuieter(extractor.catalog)
    t = pipe.topics
    channels = {dest: getattr(t, dest) for dest in DESTINATIONS}

    @app.agent(t.raw_logs, name="extract", concurrency=1)
    async def extract(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            value: bytes = event.value if isinstance(event.value, bytes) else bytes(event.value or b"")
            outs = extract_record(
                extractor, value, key_str(event.key), msg.topic, msg.partition, msg.offset, utcnow(), quieter
            )
            by_job: dict[bytes, list[Signal]] = {}
            for out in hold_job_signals(outs, by_job):
                await channels[out.dest].send(key=out.key, value=out.value)
            for key, packed in pack_jobs(by_job):
                await channels["signals_job"].send(key=key, value=packed)

    pipe.agents["extract"] = extract
