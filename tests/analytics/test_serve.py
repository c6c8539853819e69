"""`sickbay serve`: the sink and the API in one process that owns the embedded store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from connectors.kafka import ReliableProducer, ensure_topics
from schemas import codec
from schemas.topics import TopicCatalog
from streams.settings import REPO_ROOT
from tests.analytics.browser import free_port
from tests.analytics.seed import build

pytestmark = pytest.mark.integration


def _get(url: str, token: str | None = None) -> tuple[int, object]:
    request = urllib.request.Request(url)  # noqa: S310 - loopback
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as r:  # noqa: S310 - loopback
            return r.status, codec.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, codec.loads(exc.read() or b"{}")
    except OSError:  # not listening yet
        return 0, {}


def _until(what: str, check, timeout_s: float = 40.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def test_serve_ingests_live_records_answers_the_api_and_stops_cleanly(kafka_bootstrap, tmp_path):
    prefix = f"serve{uuid.uuid4().hex[:8]}"
    cat = TopicCatalog(prefix=prefix)
    ensure_topics(kafka_bootstrap, cat.all())
    port = free_port()
    env = {
        **os.environ,
        "SICKBAY_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "SICKBAY_TOPIC_PREFIX": prefix,
        "SICKBAY_CHDB_PATH": str(tmp_path / "chdb"),
        "SICKBAY_CLUSTER": "c1",
        "SICKBAY_API_PORT": str(port),
        "SICKBAY_API_TOKEN": "w",
    }
    env.pop("CLICKHOUSE_URL", None)
    env.pop("SICKBAY_API_READ_TOKEN", None)
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.cli.main", "serve", "--log-format", "json"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO_ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        ready = _until(
            "readiness", lambda: (_get(f"{url}/readyz") if proc.poll() is None else (0, {}))[0] == 200
        )
        assert ready
        # records published while serve runs: the sink thread writes them, the API reads them
        fleet = build()
        producer = ReliableProducer(kafka_bootstrap, "test-serve", linger_ms=0)
        for sig in fleet.signals:
            producer.produce(cat.signals_node.name, codec.dumps(sig), key=(sig.node or "").encode())
        for inc in fleet.incidents:
            producer.produce(cat.incidents.name, codec.dumps(inc), key=inc.job_id.encode())
        assert producer.flush(30) == 0

        def four_incidents():
            status, body = _get(f"{url}/api/v1/incidents")
            return body if status == 200 and len(body["items"]) == 4 else None

        page = _until("the incidents in the API", four_incidents)
        assert {i["job_id"] for i in page["items"]} == {"42", "43", "44", "45"}
        # a mutation goes out to Kafka and comes back through the same process's sink
        body = codec.dumps({"mode": "act", "reason": "serve test", "category": "hardware_gpu"})
        put = urllib.request.Request(f"{url}/api/v1/modes", data=body, method="PUT")  # noqa: S310
        put.add_header("Authorization", "Bearer w")
        put.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(put, timeout=10) as r:  # noqa: S310 - loopback
            assert r.status == 202
        _until(
            "the mode change in the store",
            lambda: any(m["source"] == "operator" for m in _get(f"{url}/api/v1/modes")[1]),
        )

        def metrics() -> str:
            return urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()  # noqa: S310

        assert 'sickbay_stage_events_total{stage="correlate"}' in metrics()
        _until(
            "consumer lag (librdkafka statistics, every 10 s)", lambda: "sickbay_consumer_lag{" in metrics()
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        log.close()
    lines = (tmp_path / "serve.log").read_text().splitlines()
    assert code in (0, -signal.SIGTERM), "\n".join(lines[-30:])  # uvicorn re-raises the signal it handled
    stopped = [codec.loads(line)["message"] for line in lines if '"sickbay.sink"' in line]
    assert any(m.startswith("sink stopped: consumed") for m in stopped), "\n".join(
        lines[-12:]
    )  # flushed first
    assert all(line.startswith("{") for line in lines if line.strip()), lines[:5]  # --log-format json
