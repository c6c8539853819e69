"""Dead-lettering for every agent: the reason, the error and the original bytes, then keep going."""

from __future__ import annotations

import base64
from typing import Any

from pydantic import ValidationError

from schemas import codec
from schemas.base import utcnow
from schemas.deadletter import DeadLetter


def dead_letter(
    stage: str,
    reason: str,
    error: str,
    value: bytes,
    key: str | None,
    topic: str | None,
    partition: int | None,
    offset: int | None,
) -> DeadLetter:
    return DeadLetter(
        stage=stage,
        reason=reason,
        error=error[:2048],
        topic=topic,
        partition=partition,
        offset=offset,
        key=key,
        original_b64=base64.b64encode(value).decode("ascii"),
        time=utcnow(),
    )


async def dead_letter_event(
    dlq: Any, stage: str, event: Any, key: str | None, exc: Exception, item: Any = None
) -> None:
    """Send a Faust event that a stage could not handle to the DLQ topic; with ``item``, that part
    of it (the event's value itself, or one signal of a ``SignalBatch`` whose others were handled)."""
    msg = event.message
    value = event.value if item is None else item
    raw = value if isinstance(value, bytes) else codec.dumps(value)
    reason = "invalid_record" if isinstance(exc, ValidationError) else "agent_error"
    letter = dead_letter(stage, reason, repr(exc), raw, key, msg.topic, msg.partition, msg.offset)
    await dlq.send(key=stage.encode(), value=letter)
