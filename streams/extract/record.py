"""One raw record → what the extract stage sends, shared by the Faust agent and the batched stage.

Both paths must do the same thing with a record (same signals, same ids, same dead letters), so the
decision lives here and the two stages only differ in how they read and write Kafka.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Literal, NamedTuple, get_args

from schemas.base import Contract
from schemas.raw import LogLine
from schemas.signals import RankPlacement, Signal
from streams.deadletters import dead_letter
from streams.extract.extractor import Extractor, Position
from streams.extract.k8s_events import EVENT_ADAPTER
from streams.extract.normalize import BadRecord, normalize_all, vet_without_lines
from streams.extract.quiet import RepeatQuieter
from streams.extract.rules import Rule
from streams.extract.telemetry import looks_like_metric, parse_metric

log = logging.getLogger("sickbay.extract")

Destination = Literal["signals_job", "signals_node", "raw_telemetry", "dlq"]
# each is the name of its topic in the catalog (``Settings.topics``) and in ``pipeline.Topics``
DESTINATIONS: tuple[Destination, ...] = get_args(Destination)


class Outgoing(NamedTuple):
    """One record to send: which topic of the pipeline, its key and its (typed) value."""

    dest: Destination
    key: bytes
    value: Contract


def extract_record(
    extractor: Extractor,
    value: bytes,
    key: str | None,
    topic: str,
    partition: int,
    offset: int,
    now: datetime,
    quieter: RepeatQuieter | None = None,
    literals: tuple[int, ...] | None = None,
    placements: list[RankPlacement] | None = None,
) -> list[Outgoing]:
    """Signals of one ``raw.logs`` record (job facts → ``signals.job``, node facts → ``signals.node``
    for the route step), a Vector metric event → ``raw.telemetry``, anything unreadable or a rule
    bug → one dead letter with the reason. Never raises: a bad record must not stop the stream.
    With a ``quieter``, repeats of a quiet rule's fact are not sent (``quiet.py``); a rule's
    ``diagnose_only`` signals never are.

    ``literals``: the ids (of ``extractor.catalog.prefilter``) of the rule literals a batch scan
    found in the record's bytes (``Prefilter.record_literals``). ``()``: none, and the record is then
    only checked, not read into lines, where the bytes can vouch for them (:func:`sends_nothing`).
    Some: where each line's text is a piece of the bytes (:func:`texts_within`), its rules are chosen
    among those literals' without scanning the text again.

    ``placements``: where the batched stage collects rank placements in their compact form
    (``Extractor.extract``); they are then not among the returned signals."""
    if literals is not None and not literals and sends_nothing(value):
        return []
    try:
        if (sample := parse_metric(value, key_host=key)) is not None:  # Vector metric event
            return [Outgoing("raw_telemetry", sample.node.encode(), sample)]
        out: list[Outgoing] = []
        wanted = _streamed if quieter is None else quieter.streamed
        within = literals if literals and texts_within(value) else None
        placed: list[RankPlacement] | None = None if placements is None else []
        for i, line in enumerate(normalize_all(value, key_host=key)):
            pos = Position(topic, partition, offset, nth=i)
            hint = within if _text_in_bytes(line, value) else None
            for sig in extractor.extract(line, now, pos, wanted, hint, placed):
                if sig.job_id is not None:
                    out.append(Outgoing("signals_job", sig.job_id.encode(), sig))
                else:
                    out.append(Outgoing("signals_node", (sig.node or "_unknown").encode(), sig))
        if placements is not None and placed:  # only a record read whole: a dead letter places nothing
            placements.extend(placed)
        return out
    except BadRecord as exc:
        letter = dead_letter("extract", exc.reason, exc.detail, value, key, topic, partition, offset)
    except Exception as exc:  # a rule bug: dead-letter the record and go on
        log.exception("extract failed at %s/%s/%s", topic, partition, offset)
        letter = dead_letter("extract", "extractor_error", repr(exc), value, key, topic, partition, offset)
    return [Outgoing("dlq", b"extract", letter)]


def texts_within(value: bytes) -> bool:
    """Whether each line read from this record has a text that is a piece of its bytes, so that the
    literals in the text are among those in the bytes: no backslash (a JSON escape decodes to other
    bytes), no escape byte (colours come off the text), no newline inside (CRI pieces are joined
    across lines). A Kubernetes Event's text is its JSON re-encoded: the caller leaves those out."""
    # find(), not ``in``: see telemetry.looks_like_metric
    return value.find(b"\\") < 0 and value.find(b"\x1b") < 0 and value.rstrip(b"\r\n").find(b"\n") < 0


def _text_in_bytes(line: LogLine, value: bytes) -> bool:
    """Whether the line's text is among the record's bytes as it is, given ``texts_within``: not
    an Event's (its JSON re-encoded), nor a journal entry's that the journal exported as a byte
    array (its text decoded from the numbers)."""
    if line.adapter == EVENT_ADAPTER:
        return False
    return line.adapter != "journald" or value.find(line.text.encode()) >= 0


def _streamed(rule: Rule, _job_id: str | None, _node: str | None, _when: datetime) -> bool:
    """The stream sends every signal but a ``diagnose_only`` rule's (without a quieter)."""
    return not rule.diagnose_only


def sends_nothing(value: bytes) -> bool:
    """True for a record in whose bytes no rule literal occurs (``Prefilter.records_with_literals``)
    and that :func:`extract_record` would send nothing for: no metric event, and a record the
    checks of ``vet_without_lines`` pass. Most of a fleet's records are such; the batched stage
    asks before the full call and skips it for them. False where anything is left to decide, a bad
    record included: the full read then decides, and dead-letters it with the reason."""
    try:
        return not looks_like_metric(value) and vet_without_lines(value)
    except Exception:  # the full call decides (and dead-letters) the same record
        return False


def hold_job_signals(
    outs: list[Outgoing], by_job: dict[bytes, list[Signal]], by_node: dict[bytes, list[Signal]] | None = None
) -> list[Outgoing]:
    """Set a record's job signals aside in ``by_job`` (per job key, in order) to be sent packed
    (``signal_batches.pack``), and with ``by_node`` its node facts (per node key); returns the outputs
    to send as they are."""
    rest: list[Outgoing] = []
    for out in outs:
        if out.dest == "signals_job" and isinstance(out.value, Signal):
            by_job.setdefault(out.key, []).append(out.value)
        elif by_node is not None and out.dest == "signals_node" and isinstance(out.value, Signal):
            by_node.setdefault(out.key, []).append(out.value)
        else:
            rest.append(out)
    return rest
