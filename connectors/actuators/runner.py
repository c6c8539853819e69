"""``sickbay adapter slurm``: consume the actions topic, execute, publish results and audit.

Offsets are committed only after the result is durably on the action-results
topic, so an adapter crash re-reads the action; the adapter's observe-before-act
checks then report it ``converged`` instead of acting twice.
"""

from __future__ import annotations

import hashlib
import logging
import time

from confluent_kafka import Consumer, KafkaError
from pydantic import ValidationError

from connectors.actuators.slurm_adapter import SlurmAdapter
from connectors.kafka import ReliableProducer, consumer_config
from connectors.lifecycle import StopFlag
from schemas import codec
from schemas.actions import Action, ActionResult
from schemas.audit import AuditRecord
from schemas.topics import TopicCatalog

log = logging.getLogger("sickbay.adapter")


def _audit(result: ActionResult, action: Action) -> AuditRecord:
    return AuditRecord(
        audit_id="aud-"
        + hashlib.blake2b(f"{result.action_id}|{result.status}".encode(), digest_size=8).hexdigest(),
        time=result.finished_at,
        actor=f"adapter.{result.adapter}",
        event=f"action.{result.status.value}",
        cluster=result.cluster,
        incident_id=result.incident_id,
        action_id=result.action_id,
        mode=action.mode.value,
        details={
            "kind": result.kind.value,
            "detail": result.detail,
            "commands": [" ".join(c.argv) + f" -> {c.returncode}" for c in result.commands],
        },
    )


def run_adapter(
    bootstrap: str,
    cat: TopicCatalog,
    adapter: SlurmAdapter,
    cluster: str,
    *,
    group_id: str = "sickbay-adapter-slurm",
    idle_exit_s: float | None = None,
) -> int:
    consumer = Consumer(consumer_config(bootstrap, group_id, "sickbay-adapter-slurm"))
    consumer.subscribe([cat.actions.name])
    producer = ReliableProducer(bootstrap, "sickbay-adapter-slurm", linger_ms=0)
    handled = 0
    stopping = StopFlag()
    last = time.monotonic()
    try:
        while not stopping:
            msg = consumer.poll(0.2)
            if msg is None:
                if idle_exit_s is not None and time.monotonic() - last > idle_exit_s:
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
                consumer.commit(message=msg, asynchronous=False)
                continue
            if action.scheduler != "slurm" or action.cluster != cluster:
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
            producer.produce(cat.action_results.name, codec.dumps(result), key=result.action_id.encode())
            producer.produce(
                cat.audit.name, codec.dumps(_audit(result, action)), key=action.incident_id.encode()
            )
            if producer.flush(30.0) != 0:
                raise RuntimeError("could not deliver the action result; not committing the action")
            consumer.commit(message=msg, asynchronous=False)
            handled += 1
    finally:
        consumer.close()
        producer.flush(10.0)
    return handled
