"""``sickbay adapter kubernetes``'s loop: actions topic in, results and audit out, Slurm actions left alone."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer
from lightkube import Client
from lightkube.resources.core_v1 import Node

from connectors.actuators.kubernetes_adapter import LABEL_KEY, KubernetesAdapter
from connectors.actuators.kubernetes_client import as_dict
from connectors.actuators.runner import run_adapter
from connectors.kafka import ReliableProducer, consumer_config, ensure_topics
from schemas import codec
from schemas.actions import ActionKind, ActionResult, ActionStatus
from schemas.audit import AuditRecord
from schemas.topics import TopicCatalog
from tests.kubernetes.conftest import k8s_action

pytestmark = [pytest.mark.integration, pytest.mark.timeout(5400)]


def test_runner_executes_kubernetes_actions_and_publishes_results_and_audit(
    kafka_bootstrap: str, kube: Client, make_node: Callable[..., str], uid: str
):
    prefix = f"itk{uuid.uuid4().hex[:8]}"
    cat = TopicCatalog(prefix=prefix, partitions=1, app_id=prefix)
    ensure_topics(kafka_bootstrap, cat.all())
    node = make_node(f"gpu-{uid}-r")
    drain = k8s_action(ActionKind.DRAIN_NODE, node=node)
    unknown = k8s_action(ActionKind.DRAIN_NODE, node=f"gpu-{uid}-nowhere")
    slurm = k8s_action(ActionKind.DRAIN_NODE, node=node).model_copy(update={"scheduler": "slurm"})
    producer = ReliableProducer(kafka_bootstrap, "it-actions", linger_ms=0)
    for action in (drain, unknown, slurm):
        producer.produce(cat.actions.name, codec.dumps(action), key=action.action_id.encode())
    assert producer.flush(30) == 0

    handled = run_adapter(
        kafka_bootstrap,
        cat,
        KubernetesAdapter(kube),
        "it",
        group_id=f"{prefix}-a",
        idle_exit_s=3,
        scheduler="kubernetes",
    )

    assert handled == 2  # the Slurm action is someone else's
    consumer = Consumer(consumer_config(kafka_bootstrap, f"{prefix}-check", "it-check"))
    consumer.subscribe([cat.action_results.name, cat.audit.name])
    results: dict[str, ActionResult] = {}
    audits: list[AuditRecord] = []
    deadline = time.monotonic() + 30
    while (len(results) < 2 or len(audits) < 2) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        if msg.topic() == cat.audit.name:
            audits.append(AuditRecord.model_validate(codec.loads(msg.value() or b"")))
        else:
            r = ActionResult.model_validate(codec.loads(msg.value() or b""))
            results[r.action_id] = r
    consumer.close()
    assert set(results) == {drain.action_id, unknown.action_id}
    assert results[drain.action_id].status == ActionStatus.SUCCEEDED
    assert results[drain.action_id].adapter == "kubernetes"
    assert results[unknown.action_id].status == ActionStatus.REJECTED
    assert results[unknown.action_id].detail == f"node gpu-{uid}-nowhere not found"
    assert sorted(a.event for a in audits) == ["action.rejected", "action.succeeded"]
    assert all(a.actor == "adapter.kubernetes" for a in audits)
    assert as_dict(kube.get(Node, node))["metadata"]["labels"][LABEL_KEY] == "true"
