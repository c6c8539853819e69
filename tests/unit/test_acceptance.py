"""The sure-valid check of shipper records (``streams/extract/acceptance.py``): it may say "not sure"
freely, never "valid" for a record pydantic refuses, and it must say "valid" for what shippers write."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas import codec
from schemas.raw import FilebeatRecord, FluentBitRecord, LogLine, RsyslogJsonRecord, VectorRecord
from streams.extract.acceptance import Acceptance
from streams.extract.normalize import normalize_all, vet_without_lines

SHIPPERS: list[type[BaseModel]] = [FluentBitRecord, VectorRecord, FilebeatRecord, RsyslogJsonRecord]

TIMES = st.sampled_from(
    [
        "2026-12-03T11:55:17.794862Z",
        "2026-12-03T11:55:17Z",
        "2026-12-03T11:55:17.123456789+02:00",
        "2026-12-03 11:55:17",
        "2026-12-03",
        "1796000000",
        "not a time",
        "2026-13-45T99:99:99Z",
        "",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    TIMES,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["host", "pod_name", "labels", "name", "node", "file", "path", "x"]),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=8,
)


def _keys(model: type[BaseModel]) -> list[str]:
    keys = ["extra_field", "PRIORITY"]
    for name, info in model.model_fields.items():
        keys += [name] + ([info.alias] if info.alias else [])
    return keys


def _records(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(_keys(model)), VALUES, max_size=7)


@pytest.mark.parametrize("model", SHIPPERS, ids=lambda m: m.__name__)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_record_called_valid_is_one_pydantic_takes(model, data):
    acceptance = Acceptance.of(model)
    assert acceptance is not None
    record = data.draw(_records(model))
    if acceptance.accepts(record):
        model.model_validate(record)  # raises, failing the test, if the check was wrong


@pytest.mark.parametrize(
    ("model", "record"),
    [
        (
            FluentBitRecord,
            {"@timestamp": 1796000000.5, "filename": "/var/log/x.log", "hostname": "n1", "log": "hi"},
        ),
        (
            FluentBitRecord,
            {"log": "hi", "kubernetes": {"host": "n1", "pod_name": "p", "labels": {"app": "x"}}},
        ),
        (
            VectorRecord,
            {
                "message": "hi",
                "timestamp": "2026-12-03T11:55:17.794862Z",
                "host": "n1",
                "source_type": "file",
            },
        ),
        (VectorRecord, {"message": "hi", "PRIORITY": "4", "_TRANSPORT": "kernel", "host": "n1"}),
        (
            FilebeatRecord,
            {
                "@timestamp": "2026-12-03T11:55:17.794Z",
                "message": "hi",
                "host": {"name": "n1"},
                "log": {"file": {"path": "/var/log/x"}, "offset": 12},
            },
        ),
        (RsyslogJsonRecord, {"msg": "hi", "hostname": "n1", "timereported": "2026-12-03T11:55:17+00:00"}),
    ],
)
def test_what_shippers_write_is_called_valid(model, record):
    assert Acceptance.of(model).accepts(record)  # type: ignore[union-attr]
    model.model_validate(record)


@pytest.mark.parametrize(
    ("model", "record"),
    [
        (VectorRecord, {"message": "hi", "timestamp": "not a time"}),  # pydantic refuses it
        (VectorRecord, {"message": "hi", "host": 7}),  # an int for a str: pydantic's call
        (FluentBitRecord, {"log": "hi", "@timestamp": True}),  # a bool is never taken for a number
        (FluentBitRecord, {"log": "hi", "kubernetes": {"labels": ["a"]}}),  # a nested field refuses
        (FluentBitRecord, {"@timestamp": 1.0}),  # the line is missing
    ],
)
def test_anything_unusual_is_left_to_pydantic(model, record):
    assert not Acceptance.of(model).accepts(record)  # type: ignore[union-attr]


class _Checked(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str

    @field_validator("name")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value:
            raise ValueError("empty")
        return value


class _Bounded(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(max_length=3)


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str


@pytest.mark.parametrize("model", [_Checked, _Bounded, _Closed, LogLine])
def test_a_model_whose_validation_is_more_than_its_field_types_has_no_check(model):
    assert Acceptance.of(model) is None


@settings(max_examples=200, deadline=None)
@given(record=st.one_of(_records(FluentBitRecord), _records(VectorRecord)))
@example(record={"log": "x", "@timestamp": 1e300})
@example(record={"log": "x", "time": -(10**15)})
@example(record={"message": "x", "timestamp": "1796000000"})
def test_a_record_the_check_passes_is_one_the_full_read_takes(record):
    """``vet_without_lines`` is only ever more cautious than the full read: what it passes reads."""
    raw = codec.dumps(record)
    try:
        passed = vet_without_lines(raw)
    except Exception:  # refused (or left to the full read): nothing to hold it to here
        return
    if passed:
        normalize_all(raw)  # raises, failing the test, if the check let a bad record by


def test_a_fluent_bit_clock_the_check_reads_gives_the_lines_time():
    raw = codec.dumps({"log": "x", "@timestamp": 1796000000.5})
    assert vet_without_lines(raw) is True
    [line] = normalize_all(raw)
    assert line.event_time == datetime.fromtimestamp(1796000000.5, tz=UTC)
