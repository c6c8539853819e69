"""The base every sickbay contract derives from."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def as_utc(value: datetime) -> datetime:
    """Naive datetimes are read as UTC: every node's clock is compared on one axis."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


def utcnow() -> datetime:
    return datetime.now(UTC)


class Contract(BaseModel):
    """A versioned record on the wire.

    ``schema_version`` lets a consumer refuse (dead-letter) a record written by a
    newer producer instead of misreading it. Unknown fields are rejected so a typo
    in a producer fails loudly at the boundary, not three agents later.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_version: int = Field(default=1, ge=1, le=1)
