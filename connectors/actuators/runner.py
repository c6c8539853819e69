"""``sickbay adapter slurm``: consume the actions topic, execute, publish results and audit.

Offsets are committed only after the result is durably on the action-results
topic, so an adapter crash re-reads the action; the adapter's observe-before-act
checks then report it ``converged`` instead of acting twice.

Reconciliation: an executed (or pending) action is not trusted until a fresh
scheduler observation shows the wanted state. The runner asks the adapter's
``holds(action)`` with a growing interval and publishes a second result —
``converged`` when it holds, ``abandoned`` when the reconcile deadline passes
first (a human has to look). Reconciliation lives in the process: an adapter that
restarts does not resume the checks it had pending (the re-delivered action is
observed afresh instead).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from confluent_kafka import Consumer, KafkaError, Message
from pydantic import ValidationError

from connectors.kafka import ReliableProducer, consumer_config
from connectors.lifecycle import StopFlag
from schemas import codec
from schemas.actions import Action, ActionResult, ActionStatus
from schemas.audit import AuditRecord
from schemas.base import utcnow
from schemas.topics import TopicCatalog

log = logging.getLogger("sickbay.adapter")


class Adapter(Protocol):
    """What the loop needs of a scheduler adapter (Slurm, Kubernetes)."""

    def handle(self, action: Action) -> ActionResult: ...

    def sweep_expired(
        self, cluster: str, *, now: datetime | None = None, dry_run: bool = False
    ) -> list[ActionResult]: ...


@dataclass
class _Check:
    action: Action
    result: ActionResult
    started: float
    due: float
    interval: float


class Reconciler:
    """Pending checks of executed actions against fresh scheduler observations."""

    def __init__(self, adapter: object, deadline_s: float, first_check_s: float = 0.5) -> None:
        self.holds = getattr(adapter, "holds", None)
        self.deadline_s = deadline_s
        self.first_check_s = first_check_s
        self.pending: list[_Check] = []

    def track(self, action: Action, result: ActionResult) -> None:
        if self.holds is None or action.dry_run:
            return
        if result.status not in (ActionStatus.SUCCEEDED, ActionStatus.PENDING):
            return
        now = time.monotonic()
        self.pending.append(_Check(action, result, now, now + self.first_check_s, self.first_check_s))

    def due(self) -> list[ActionResult]:
        """Second results for the checks that settled (converged or abandoned) by now."""
        holds = self.holds
        if holds is None:
            return []
        now, out, keep = time.monotonic(), [], []
        for check in self.pending:
            if now < check.due:
                keep.append(check)
                continue
            held = holds(check.action)
            waited = now - check.started
            if held:
                out.append(self._settled(check, ActionStatus.CONVERGED, f"observed after {waited:.1f}s"))
            elif waited >= self.deadline_s:
                out.append(
                    self._settled(
                        check,
                        ActionStatus.ABANDONED,
                        f"the scheduler did not show the wanted state within {self.deadline_s:.0f}s",
                    )
                )
            else:
                check.interval = min(check.interval * 2, 10.0)
                check.due = now + check.interval
                keep.append(check)
        self.pending = keep
        return out

    @staticmethod
    def _settled(check: _Check, status: ActionStatus, detail: str) -> ActionResult:
        return check.result.model_copy(
            update={
                "status": status,
                "detail": f"reconciled: {detail}",
                "finished_at": utcnow(),
                "commands": [],
            }
        )


def _audit(result: ActionResult, mode: str) -> AuditRecord:
    return AuditRecord(
        audit_id="aud-"
        + hashlib.blake2b(f"{result.action_id}|{result.status}".encode(), digest_size=8).hexdigest(),
        time=result.finished_at,
        actor=f"adapter.{result.adapter}",
        event=f"action.{result.status.value}",
        cluster=result.cluster,
        incident_id=result.incident_id,
        action_id=result.action_id,
        mode=mode,
        details={
            "kind": result.kind.value,
            "detail": result.detail,
            "commands": [" ".join(c.argv) + f" -> {c.returncode}" for c in result.commands],
        },
    )


def run_adapter(
    bootstrap: str,
    cat: TopicCatalog,
    adapter: Adapter,
    cluster: str,
    *,
    group_id: str = "sickbay-adapter-slurm",
    idle_exit_s: float | None = None,
    sweep_every_s: float | None = None,
    scheduler: Literal["slurm", "kubernetes"] = "slurm",
    reconcile_s: float = 120.0,
) -> int:
    """Handle actions until stopped. ``sweep_every_s``: also resume expired sickbay drains that often.
    ``reconcile_s``: how long an executed action may take to show in the scheduler before it is abandoned."""
    consumer = Consumer(consumer_config(bootstrap, group_id, f"sickbay-adapter-{scheduler}"))
    consumer.subscribe([cat.actions.name])
    producer = ReliableProducer(bootstrap, f"sickbay-adapter-{scheduler}", linger_ms=0)
    handled = 0
    reconciler = Reconciler(adapter, reconcile_s)
    stopping = StopFlag()
    last = time.monotonic()
    next_sweep = time.monotonic()
    try:
        while not stopping:
            if sweep_every_s is not None and time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + sweep_every_s
                _sweep(adapter, cluster, producer, cat)
            for settled in reconciler.due():
                _publish(producer, cat, settled, "act")
                log.info("%s %s -> %s", settled.kind.value, settled.action_id, settled.status.value)
            msg = consumer.poll(0.2)
            if msg is None:
                if (
                    idle_exit_s is not None
                    and time.monotonic() - last > idle_exit_s
                    and not reconciler.pending
                ):
                    break
                continue
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consumer error: %s", err)
                continue
            last = time.monotonic()
            try:
                action = Action.model_validate(codec.loads(msg.value() or b""))
            except (ValidationError, ValueError) as exc:
                log.error(
                    "unreadable action at %s/%d/%d: %s", msg.topic(), msg.partition(), msg.offset(), exc
                )
                _dead_letter(producer, cat, msg, exc, f"adapter.{scheduler}")
                consumer.commit(message=msg, asynchronous=False)
                continue
            if action.scheduler != scheduler or action.cluster != cluster:
                consumer.commit(message=msg, asynchronous=False)
                continue
            result = adapter.handle(action)
            log.info(
                "%s %s -> %s (%s)",
                action.kind.value,
                action.node or action.job_id,
                result.status.value,
                result.detail,
            )
            _publish(producer, cat, result, action.mode.value)
            reconciler.track(action, result)
            if producer.flush(30.0) != 0:
                raise RuntimeError("could not deliver the action result; not committing the action")
            consumer.commit(message=msg, asynchronous=False)
            handled += 1
    finally:
        consumer.close()
        producer.flush(10.0)
    return handled


def _publish(producer: ReliableProducer, cat: TopicCatalog, result: ActionResult, mode: str) -> None:
    producer.produce(cat.action_results.name, codec.dumps(result), key=result.action_id.encode())
    producer.produce(cat.audit.name, codec.dumps(_audit(result, mode)), key=result.incident_id.encode())


def _dead_letter(
    producer: ReliableProducer, cat: TopicCatalog, msg: Message, exc: Exception, stage: str
) -> None:
    """An action the adapter cannot read goes to the DLQ with its bytes, not only to the log."""
    from streams.deadletters import dead_letter

    key = msg.key()
    record = dead_letter(
        stage,
        "unreadable_action",
        str(exc),
        msg.value() or b"",
        key.decode("utf-8", "replace") if isinstance(key, bytes) else None,
        msg.topic(),
        msg.partition(),
        msg.offset(),
    )
    producer.produce(cat.dlq.name, codec.dumps(record), key=key if isinstance(key, bytes) else None)
    if producer.flush(30.0) != 0:
        raise RuntimeError("could not dead-letter an unreadable action; not committing it")


def _sweep(adapter: Adapter, cluster: str, producer: ReliableProducer, cat: TopicCatalog) -> None:
    """Resume expired sickbay drains; each resume is a result and an audit record like any action's."""
    try:
        results = adapter.sweep_expired(cluster)
    except Exception as exc:  # the controller may be away for a moment: the next sweep tries again
        log.warning("drain expiry sweep failed: %s", exc)
        return
    for result in results:
        log.info("sweep: %s -> %s (%s)", result.action_id, result.status.value, result.detail)
        producer.produce(cat.action_results.name, codec.dumps(result), key=result.action_id.encode())
        producer.produce(
            cat.audit.name, codec.dumps(_audit(result, "sweep")), key=(result.incident_id or "sweep").encode()
        )
    if results and producer.flush(30.0) != 0:
        raise RuntimeError("could not deliver the sweep results")
