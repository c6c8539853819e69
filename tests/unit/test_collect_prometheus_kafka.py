"""The ``sickbay collect prometheus`` and ``sickbay collect loki`` commands, end to end: a local HTTP
server (dcgm-exporter text, Loki query_range JSON) → the CLI process → the real Kafka broker."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from connectors.kafka import consumer_config, ensure_topics
from schemas import codec
from schemas.telemetry import GpuTelemetry
from schemas.topics import TopicCatalog
from streams.settings import REPO_ROOT
from tests.unit.test_collect_loki import POD, FakeLoki
from tests.unit.test_collect_prometheus import Server

pytestmark = pytest.mark.integration


@pytest.fixture
def catalog(kafka_bootstrap: str) -> TopicCatalog:
    prefix = f"it{uuid.uuid4().hex[:8]}"
    cat = TopicCatalog(prefix=prefix, partitions=2, app_id=prefix)
    ensure_topics(kafka_bootstrap, cat.all())
    return cat


@pytest.fixture
def dcgm() -> Iterator[Server]:
    srv = Server()
    threading.Thread(target=srv.httpd.serve_forever, daemon=True).start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


@pytest.fixture
def loki() -> Iterator[FakeLoki]:
    srv = FakeLoki()
    threading.Thread(target=srv.httpd.serve_forever, daemon=True).start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def _cli(
    kafka_bootstrap: str, cat: TopicCatalog, state_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {
        "SICKBAY_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "SICKBAY_TOPIC_PREFIX": cat.prefix,
        "SICKBAY_PARTITIONS": "2",
        "SICKBAY_CLUSTER": "it",
        "SICKBAY_STATE_DIR": str(state_dir),
        "PATH": os.environ["PATH"],
    }
    return subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "collect", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )


def _consume(kafka_bootstrap: str, topic: str, n: int) -> list[tuple[bytes | None, Any]]:
    consumer = Consumer(consumer_config(kafka_bootstrap, f"it-{uuid.uuid4().hex}", "it"))
    consumer.subscribe([topic])
    got: list[tuple[bytes | None, Any]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(got) < n:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.key(), codec.loads(msg.value() or b"")))
    consumer.close()
    return got


def _report(stderr: str) -> dict[str, Any]:
    line = next(x for x in stderr.splitlines() if x.startswith("coverage "))
    rep: dict[str, Any] = codec.loads(line.removeprefix("coverage "))
    return rep


def test_collect_prometheus_puts_one_sample_per_gpu_on_raw_telemetry(
    kafka_bootstrap, catalog, dcgm, tmp_path
):
    proc = _cli(
        kafka_bootstrap, catalog, tmp_path, "prometheus", "--metrics-url", dcgm.url + "/metrics", "--once"
    )
    assert proc.returncode == 0, proc.stderr
    rep = _report(proc.stderr)
    assert rep["collector"] == "prometheus" and rep["final"] and rep["broker_reachable"]
    assert rep["counts"]["telemetry_records"] == 2 and rep["counts"]["delivered"] == 2
    got = _consume(kafka_bootstrap, catalog.raw_telemetry.name, 2)
    recs = sorted((GpuTelemetry.model_validate(v) for _, v in got), key=lambda r: r.gpu or 0)
    assert [k for k, _ in got] == [b"gpu-03", b"gpu-03"]
    assert [(r.gpu, r.cluster, r.job_id, r.metrics["DCGM_FI_DEV_GPU_TEMP"]) for r in recs] == [
        (0, "it", "4711", 41.0),
        (1, "it", "4711", 42.0),
    ]


def test_collect_prometheus_exits_3_with_a_report_when_no_target_answers(kafka_bootstrap, catalog, tmp_path):
    proc = _cli(
        kafka_bootstrap,
        catalog,
        tmp_path,
        "prometheus",
        "--metrics-url",
        "http://127.0.0.1:9/metrics",
        "--once",
    )
    assert proc.returncode == 3, proc.stderr
    reached = {r["target"]: r for r in _report(proc.stderr)["reached"]}
    assert reached["http://127.0.0.1:9/metrics"]["ok"] is False
    assert reached["http://127.0.0.1:9/metrics"]["kind"] == "exporter"


def test_collect_loki_delivers_lines_and_saves_the_cursor_after_kafka_acknowledged(
    kafka_bootstrap: str, catalog: TopicCatalog, loki: FakeLoki, tmp_path: Path
) -> None:
    now_ns = time.time_ns()
    loki.entries += [(now_ns - 2_000_000_000, POD, "first"), (now_ns - 1_000_000_000, POD, "second")]
    cursor = tmp_path / "loki.cursor"
    args = ["loki", '{namespace="llm"}', "--url", loki.url, "--cursor", str(cursor), "--delay", "0", "--once"]
    proc = _cli(kafka_bootstrap, catalog, tmp_path / "state", *args)
    assert proc.returncode == 0, proc.stderr
    got = _consume(kafka_bootstrap, catalog.raw_logs.name, 1)
    assert [k for k, _ in got] == [b"gpu-03"]
    assert [v[1] for v in got[0][1]["streams"][0]["values"]] == ["first", "second"]
    assert codec.loads(cursor.read_bytes())["last_ns"] == now_ns - 1_000_000_000
    again = _cli(kafka_bootstrap, catalog, tmp_path / "state", *args)
    assert again.returncode == 0 and _report(again.stderr)["counts"]["lines"] == 0
