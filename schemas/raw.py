"""Raw log records exactly as the log shippers operators already run write them to Kafka.

Each shipper gets its own model (shape detected by keys, never by topic name) and
all of them normalise to one :class:`LogLine`. Unknown extra keys are kept
(``extra="allow"``): shippers add fields through filters and we must not reject them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from schemas.base import Contract, UtcDatetime

Adapter = Literal[
    "fluentbit",
    "vector",
    "plain",
    "sickbay",
    "filebeat",
    "otlp",
    "rsyslog",
    "loki",
    "syslog",
    "k8s-event",
    "journald",
]


class _ShipperModel(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class FluentBitKubernetes(_ShipperModel):
    """The map Fluent Bit's ``kubernetes`` filter adds; ``host`` is the node name."""

    host: str | None = None
    pod_name: str | None = None
    namespace_name: str | None = None
    container_name: str | None = None
    labels: dict[str, Any] = Field(default_factory=dict)
    annotations: dict[str, Any] = Field(default_factory=dict)


class FluentBitRecord(_ShipperModel):
    """Fluent Bit ``kafka`` output, ``format json``.

    ``@timestamp`` is epoch seconds as a float by default (``timestamp_format
    double``) or ISO 8601; ``log`` is the line (it may still carry a CRI prefix when
    no CRI parser ran). ``hostname``/``host`` come from a ``record_modifier`` filter
    on bare-metal nodes; ``filename``/``file`` from the tail input's ``Path_Key``.
    """

    log: str
    timestamp: float | datetime | None = Field(default=None, alias="@timestamp")
    time: float | datetime | None = None
    stream: str | None = None
    hostname: str | None = None
    host: str | None = None
    filename: str | None = None
    file: str | None = None
    kubernetes: FluentBitKubernetes | None = None


class VectorKubernetes(_ShipperModel):
    pod_name: str | None = None
    pod_namespace: str | None = None
    pod_node_name: str | None = None
    container_name: str | None = None
    pod_labels: dict[str, Any] = Field(default_factory=dict)
    pod_annotations: dict[str, Any] = Field(default_factory=dict)


class VectorRecord(_ShipperModel):
    """Vector ``kafka`` sink with ``encoding.codec = "json"`` (file, journald, syslog,
    kubernetes_logs sources): ``message``, RFC 3339 ``timestamp``, ``host``, ``source_type``."""

    message: str
    timestamp: datetime | None = None
    host: str | None = None
    source_type: str | None = None
    file: str | None = None
    stream: str | None = None
    kubernetes: VectorKubernetes | None = None


class EcsNamed(_ShipperModel):
    name: str | None = None


class EcsKubernetesPod(_ShipperModel):
    name: str | None = None
    uid: str | None = None


class EcsKubernetes(_ShipperModel):
    """Filebeat's ``add_kubernetes_metadata``: nested maps, ``namespace`` a plain string."""

    pod: EcsKubernetesPod | None = None
    namespace: str | None = None
    node: EcsNamed | None = None
    container: EcsNamed | None = None
    labels: dict[str, Any] = Field(default_factory=dict)


class EcsContainer(_ShipperModel):
    id: str | None = None
    name: str | None = None


class EcsLogFile(_ShipperModel):
    path: str | None = None


class EcsLog(_ShipperModel):
    file: EcsLogFile | None = None
    offset: int | None = None


class FilebeatRecord(_ShipperModel):
    """Filebeat / Elastic Agent ``output.kafka`` with the default ``codec.json``: ECS field names
    (``@timestamp`` RFC 3339, ``message``, ``host.name``, ``log.file.path``, ``container.id``,
    ``kubernetes.pod.name``/``namespace``/``node.name``/``container.name``/``labels``)."""

    message: str
    timestamp: datetime | None = Field(default=None, alias="@timestamp")
    host: EcsNamed | None = None
    log: EcsLog | None = None
    container: EcsContainer | None = None
    kubernetes: EcsKubernetes | None = None
    stream: str | None = None


class RsyslogJsonRecord(_ShipperModel):
    """rsyslog ``omkafka`` with a JSON template: ``%jsonmesg%`` (``msg``, ``hostname``,
    ``timereported``, ``syslogtag``, ``programname``, ``fromhost``) or a hand-written
    ``type="list"`` template that uses the same property names."""

    msg: str
    hostname: str | None = None
    fromhost: str | None = None
    timereported: datetime | None = None
    timegenerated: datetime | None = None
    syslogtag: str | None = None
    programname: str | None = None


_LAST_SECOND = 253402300799  # 9999-12-31T23:59:59Z: a time past it cannot be a datetime
_Byte = Annotated[int, Field(ge=0, le=255)]
_EpochSeconds = Annotated[float, Field(ge=0, le=_LAST_SECOND)]
_EpochMicros = Annotated[int, Field(ge=0, le=_LAST_SECOND * 1_000_000)]


class FluentBitKmsgRecord(_ShipperModel):
    """Fluent Bit's ``kmsg`` input (the kernel's ring buffer) through its ``kafka`` output, ``format
    json``: ``msg``, ``priority``, ``sequence`` and ``sec`` / ``usec`` since boot. Fluent Bit stamps
    the record with the wall-clock time of the kernel's line (boot time plus ``sec``) as
    ``@timestamp``; the host comes from a ``record_modifier`` filter or the Kafka key."""

    msg: str
    priority: int | None = None
    sequence: int | None = None
    sec: int | None = None
    usec: int | None = None
    timestamp: _EpochSeconds | datetime | None = Field(default=None, alias="@timestamp")
    hostname: str | None = None
    host: str | None = None


def _journal_key(name: str) -> AliasChoices:
    """A journal field under each name a shipper may give it: as the journal has it
    (``_HOSTNAME``), with Fluent Bit's ``Strip_Underscores`` (``HOSTNAME``), ``Lowercase``
    (``_hostname``) or both (``hostname``)."""
    bare = name.lstrip("_")
    return AliasChoices(name, bare, name.lower(), bare.lower())


class JournaldRecord(_ShipperModel):
    """A systemd journal entry as the shippers that read the journal write it: Fluent Bit's
    ``systemd`` input through its ``kafka`` output (``format json``; the journal's field names as
    they are or changed by ``Strip_Underscores`` / ``Lowercase``; the entry's time as
    ``@timestamp``), and ``journalctl -o json`` (``__REALTIME_TIMESTAMP``). On nodes that keep no
    ``kern.log`` this is how the kernel's Xid, ECC and mlx5 lines reach Kafka
    (``Systemd_Filter _TRANSPORT=kernel``).

    ``MESSAGE`` is text, or the journal's byte array where it is not UTF-8 (``journalctl -o json``).
    Times are bounded here, so a record the model takes always converts."""

    message: str | list[_Byte] = Field(validation_alias=_journal_key("MESSAGE"))
    hostname: str | None = Field(default=None, validation_alias=_journal_key("_HOSTNAME"))
    # when the line was written (the kernel's own time for kernel lines), in µs since the epoch
    source_time: _EpochMicros | None = Field(
        default=None, validation_alias=_journal_key("_SOURCE_REALTIME_TIMESTAMP")
    )
    # when journald received it: journalctl's export field
    journal_time: _EpochMicros | None = Field(
        default=None, validation_alias=AliasChoices("__REALTIME_TIMESTAMP", "__realtime_timestamp")
    )
    timestamp: _EpochSeconds | datetime | None = Field(default=None, validation_alias="@timestamp")
    identifier: str | None = Field(default=None, validation_alias=_journal_key("SYSLOG_IDENTIFIER"))
    transport: str | None = Field(default=None, validation_alias=_journal_key("_TRANSPORT"))
    unit: str | None = Field(default=None, validation_alias=_journal_key("_SYSTEMD_UNIT"))


class SickbayLineRecord(Contract):
    """What ``sickbay collect file`` writes for a plain text line it tails itself."""

    line: str
    host: str | None = None
    file: str | None = None
    line_no: int | None = None
    time: UtcDatetime | None = None
    job_id: str | None = None


class SickbayLinesRecord(Contract):
    """Several consecutive plain lines of one file in one Kafka record (``sickbay collect files
    --lines-per-record N``): per-record cost is paid once per batch; ``line_no`` is the first line's."""

    lines: list[str] = Field(min_length=1)
    host: str | None = None
    file: str | None = None
    line_no: int | None = None
    time: UtcDatetime | None = None
    job_id: str | None = None


class LogLine(Contract):
    """One log line, normalised from any shipper shape: the extractor's only input."""

    text: str
    adapter: Adapter
    host: str | None = None
    event_time: UtcDatetime | None = None
    job_id: str | None = None
    file: str | None = None
    stream: str | None = None
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
