"""Dead letters: records a stage could not take, kept with the reason and the original bytes."""

from __future__ import annotations

from pydantic import Field

from schemas.base import Contract, UtcDatetime


class DeadLetter(Contract):
    stage: str  # which agent refused it
    reason: str  # short machine-friendly reason, e.g. "invalid_json"
    error: str = Field(max_length=2048)
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    original_b64: str  # base64: the bytes may not be text at all
    time: UtcDatetime
