"""OTLP logs in protobuf, as the OpenTelemetry Collector's and Grafana Alloy's Kafka exporters write
them by default (``encoding: otlp_proto``): one ``LogsData`` message a Kafka record.

Why a reader of its own: such a record is binary, and read as a text line it would be refused
(``binary``) with every log line inside it. It is decoded with the official generated messages
(``opentelemetry-proto``) and handed on in OTLP's JSON mapping, the form the JSON encoding
(``otlp_json``) already takes, so both encodings become lines the same way
(``normalize._from_otlp``).

How a record is told apart: a ``LogsData`` starts with its first ``resource_logs`` (field 1, length
delimited: the byte ``0x0a``), must parse, and must hold a log record. A text line that starts with
a newline and happens to parse but holds no log record is left to the text reader.
"""

from __future__ import annotations

from typing import Any

_FIRST_BYTE = b"\n"  # field 1 (resource_logs), wire type 2 (length delimited)


def looks_like_otlp_proto(value: bytes) -> bool:
    """The cheap test before the parse: the tag byte of ``LogsData.resource_logs``."""
    return value[:1] == _FIRST_BYTE


def otlp_proto_logs(value: bytes) -> dict[str, Any] | None:
    """The record as OTLP JSON (``{"resourceLogs": [...]}``), or None when it is not a ``LogsData``
    with at least one log record."""
    if not looks_like_otlp_proto(value):
        return None
    # imported here: a site without OTLP never pays for protobuf's import
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.logs.v1.logs_pb2 import LogsData

    try:
        data = LogsData.FromString(value)
    except (DecodeError, ValueError, RecursionError):
        return None
    if not any(scope.log_records for resource in data.resource_logs for scope in resource.scope_logs):
        return None
    out: dict[str, Any] = MessageToDict(data)
    return out
