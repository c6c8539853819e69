"""Faust agent ``extract``: raw.logs → signals.node / signals.job, unreadable records → dlq."""

from __future__ import annotations

import logging
from typing import Any

from schemas.base import utcnow
from schemas.signals import Signal
from streams.deadletters import dead_letter
from streams.extract.extractor import Extractor, Position
from streams.extract.normalize import BadRecord, normalize_all
from streams.extract.telemetry import parse_metric
from streams.pipeline import Pipeline, key_str

log = logging.getLogger("sickbay.extract")


async def publish_signal(pipe: Pipeline, signal: Signal) -> None:
    """Job facts go to signals.job; node facts wait on signals.node for the route step."""
    t = pipe.topics
    if signal.job_id is not None:
        await t.signals_job.send(key=signal.job_id.encode(), value=signal)
    else:
        await t.signals_node.send(key=(signal.node or "_unknown").encode(), value=signal)


def register(pipe: Pipeline) -> None:
    app = pipe.app
    extractor = Extractor()

    @app.agent(pipe.topics.raw_logs, name="extract", concurrency=1)
    async def extract(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            value: bytes = event.value if isinstance(event.value, bytes) else bytes(event.value or b"")
            key = key_str(event.key)
            try:
                if (sample := parse_metric(value, key_host=key)) is not None:  # Vector metric event
                    await pipe.topics.raw_telemetry.send(key=sample.node.encode(), value=sample)
                    continue
                lines = normalize_all(value, key_host=key)
                now = utcnow()
                signals = [
                    sig
                    for i, line in enumerate(lines)
                    for sig in extractor.extract(
                        line, now, Position(msg.topic, msg.partition, msg.offset, index=i)
                    )
                ]
            except BadRecord as exc:
                await pipe.topics.dlq.send(
                    key=b"extract",
                    value=dead_letter(
                        "extract", exc.reason, exc.detail, value, key, msg.topic, msg.partition, msg.offset
                    ),
                )
                continue
            except Exception as exc:  # a rule bug must not stop the stream: dead-letter and go on
                log.exception("extract failed at %s/%s/%s", msg.topic, msg.partition, msg.offset)
                await pipe.topics.dlq.send(
                    key=b"extract",
                    value=dead_letter(
                        "extract",
                        "extractor_error",
                        repr(exc),
                        value,
                        key,
                        msg.topic,
                        msg.partition,
                        msg.offset,
                    ),
                )
                continue
            for signal in signals:
                await publish_signal(pipe, signal)

    pipe.agents["extract"] = extract
