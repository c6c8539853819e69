"""A real Faust worker killed with SIGKILL comes back with its tables from the changelogs:
the same incident keeps its id and revisions, and no action is proposed twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from connectors.kafka import ReliableProducer, consumer_config, ensure_topics
from schemas import codec
from schemas.actions import Action
from schemas.incidents import Incident
from streams.settings import REPO_ROOT, Settings
from tests.factories import kernel_xid, nccl_timeout, slurmctld_allocate

pytestmark = pytest.mark.integration


def _start_worker(env: dict[str, str], log: Path, start: int) -> subprocess.Popen[bytes]:
    """Start a worker and wait for its ``start``-th "Ready" in the shared log."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.cli.main", "worker"],
        env=env,
        cwd=REPO_ROOT,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if log.read_text(errors="replace").count("Worker]: Ready") >= start:
            return proc
        if proc.poll() is not None:
            pytest.fail(f"worker exited early:\n{log.read_text()[-4000:]}")
        time.sleep(0.25)
    pytest.fail(f"worker not ready:\n{log.read_text()[-4000:]}")


def _read(consumer: Consumer, want: int, timeout_s: float) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(out) < want:
        msg = consumer.poll(0.3)
        if msg is not None and msg.error() is None and msg.value() is not None:
            out.append(msg.value())
    return out


def test_sigkill_and_restart_keeps_incident_identity_and_proposes_no_action_twice(kafka_bootstrap, tmp_path):
    run = uuid.uuid4().hex[:8]
    env = {
        **os.environ,
        "SICKBAY_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "SICKBAY_TOPIC_PREFIX": f"rec{run}",
        "SICKBAY_APP_ID": f"rec{run}",
        "SICKBAY_STATE_DIR": str(tmp_path),
        "SICKBAY_FAUST_STORE": "rocksdb://",
        "SICKBAY_ROOT_GRACE_S": "2",
        "SICKBAY_MODE": "observe",
    }
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=f"rec{run}", app_id=f"rec{run}")
    cat = settings.topics
    ensure_topics(kafka_bootstrap, cat.all())
    producer = ReliableProducer(kafka_bootstrap, "it-recovery", linger_ms=0)
    incidents = Consumer(consumer_config(kafka_bootstrap, f"it-inc-{run}", "it"))
    incidents.subscribe([cat.incidents.name])
    log = tmp_path / "worker.log"
    worker = _start_worker(env, log, start=1)
    try:
        now = datetime.now(UTC)
        producer.produce(
            cat.raw_logs.name,
            slurmctld_allocate("5150", "gpu-[11-14]", now - timedelta(minutes=1)),
            key=b"ctl",
        )
        producer.produce(cat.raw_logs.name, kernel_xid("gpu-13", 79, now), key=b"gpu-13")
        assert producer.flush(10) == 0
        first = [Incident.model_validate(codec.loads(v)) for v in _read(incidents, 1, 60)]
        assert len(first) == 1, log.read_text()[-3000:]
        time.sleep(2.5)  # let the worker commit offsets and flush its changelogs

        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        worker = _start_worker(env, log, start=2)

        for rank, node in enumerate(["gpu-11", "gpu-12", "gpu-14"]):
            producer.produce(
                cat.raw_logs.name,
                nccl_timeout(node, rank, "5150", now + timedelta(seconds=5)),
                key=node.encode(),
            )
        assert producer.flush(10) == 0
        # revisions follow the evidence as it arrives: read until one holds all three timeouts
        later: list[Incident] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            i.supporting and i.supporting[0].count == 3 for i in later
        ):
            later += [Incident.model_validate(codec.loads(v)) for v in _read(incidents, 1, 5)]
        assert later, log.read_text()[-3000:]
        newest = max(later, key=lambda i: i.revision)
        assert newest.incident_id == first[0].incident_id
        assert newest.revision > first[0].revision
        assert newest.supporting and newest.supporting[0].count == 3
        assert newest.job_nodes == ["gpu-11", "gpu-12", "gpu-13", "gpu-14"]  # topology came back too
    finally:
        incidents.close()
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(30)
    actions_consumer = Consumer(consumer_config(kafka_bootstrap, f"it-act-{run}", "it"))
    actions_consumer.subscribe([cat.actions.name])
    actions = [Action.model_validate(codec.loads(v)) for v in _read(actions_consumer, 10, 8)]
    actions_consumer.close()
    assert sorted(a.kind.value for a in actions) == ["drain_node", "requeue_job"]
