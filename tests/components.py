"""Real components for integration tests, picked in this order:

1. an address from the environment (``SICKBAY_TEST_KAFKA``, ``SICKBAY_TEST_SLURM_CONF``, ``CLICKHOUSE_URL``);
2. testcontainers, when a Docker daemon answers (Kafka, ClickHouse);
3. the local real component, started by the project's own ``deploy/local`` scripts.

A test that needs a component and cannot get one fails with a message that says
what is missing; it never skips silently.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from streams.settings import REPO_ROOT

LOCAL = REPO_ROOT / "deploy" / "local"


def docker_available() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


def _script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(LOCAL / name), *args], capture_output=True, text=True, timeout=600, check=False
    )


def _running(name: str) -> bool:
    return _script(name, "status").returncode == 0


@contextmanager
def _topics_dropped_after(bootstrap: str) -> Iterator[None]:
    """Drop every topic the session created. Each test names its own topics, so a suite leaves
    about a thousand partitions behind; the broker replays all of them at its next start, which
    made `make test` then `make demo` in one checkout wait minutes for the broker."""
    from connectors.kafka import admin, delete_topics

    before = set(admin(bootstrap).list_topics(timeout=10.0).topics)
    try:
        yield
    finally:
        try:
            after = set(admin(bootstrap).list_topics(timeout=10.0).topics)
            busy = _families(_topics_in_use(bootstrap))
            created = sorted(t for t in after - before if not t.startswith("__") and _family(t) not in busy)
            for i in range(0, len(created), 200):
                delete_topics(bootstrap, created[i : i + 200], timeout_s=60.0)
        except Exception as exc:  # cleanup must not turn a green run red
            print(f"warning: could not drop the test session's topics: {exc}")


def _family(topic: str) -> str:
    """A topic's application prefix: ``bench2026.raw.logs`` and ``bench2026-windows-changelog``
    both belong to ``bench2026``."""
    return re.split(r"[.-]", topic, maxsplit=1)[0]


def _families(topics: set[str]) -> set[str]:
    return {_family(t) for t in topics}


def _topics_in_use(bootstrap: str) -> set[str]:
    """Topics some consumer group with live members reads right now. A benchmark, a demo or
    another test session sharing the broker creates topics while this session runs; their
    families are spared. Our own workers have stopped by teardown, so their groups are empty."""
    from connectors.kafka import admin

    client = admin(bootstrap)
    listing = client.list_consumer_groups(request_timeout=10).result()
    ids = [g.group_id for g in listing.valid]
    topics: set[str] = set()
    for i in range(0, len(ids), 50):
        for future in client.describe_consumer_groups(ids[i : i + 50], request_timeout=10).values():
            try:
                members = future.result().members
            except Exception as exc:  # a group that vanished meanwhile: nothing of it to spare
                print(f"note: consumer group not described during topic cleanup: {exc}")
                members = []
            for member in members:
                if member.assignment is not None:
                    topics.update(tp.topic for tp in member.assignment.topic_partitions)
    return topics


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    from connectors.kafka import KafkaUnavailable, wait_for_broker

    addr = os.environ.get("SICKBAY_TEST_KAFKA")
    if addr:
        try:
            wait_for_broker(addr, 30)
        except KafkaUnavailable as exc:
            pytest.fail(f"SICKBAY_TEST_KAFKA={addr} does not answer: {exc}")
        with _topics_dropped_after(addr):
            yield addr
        return
    if docker_available():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    was_running = _running("kafka.sh")
    up = _script("kafka.sh", "up")
    if up.returncode != 0:
        pytest.fail(
            "no Kafka for the integration tests: SICKBAY_TEST_KAFKA is unset, no Docker daemon answers, and "
            f"deploy/local/kafka.sh up failed (needs Java 17 and Maven Central):\n{up.stdout}\n{up.stderr}"
        )
    addr = f"127.0.0.1:{os.environ.get('SICKBAY_KAFKA_PORT', '39092')}"
    wait_for_broker(addr, 60)
    with _topics_dropped_after(addr):
        yield addr
    if not was_running:
        _script("kafka.sh", "down")


@pytest.fixture(scope="session")
def slurm_conf() -> Iterator[Path]:
    conf = os.environ.get("SICKBAY_TEST_SLURM_CONF")
    if conf:
        if not Path(conf).is_file():
            pytest.fail(f"SICKBAY_TEST_SLURM_CONF={conf} is not a file")
        yield Path(conf)
        return
    was_running = _running("slurm.sh")
    up = _script("slurm.sh", "up")
    if up.returncode != 0:
        pytest.fail(
            "no Slurm for the integration tests: SICKBAY_TEST_SLURM_CONF is unset and deploy/local/slurm.sh up "
            f"failed (needs apt for slurm-wlm and munge):\n{up.stdout}\n{up.stderr}"
        )
    env = _script("slurm.sh", "env").stdout.strip()
    conf = Path(env.split("=", 1)[1].strip().strip("'\""))
    _undo_sickbay_drains(conf)  # a demo run with --keep may have left one
    yield conf
    if not was_running:
        _script("slurm.sh", "down")


def _undo_sickbay_drains(conf: Path) -> None:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    out = subprocess.run(
        ["sinfo", "-R", "-h", "-N", "-o", "%N|%E"], capture_output=True, text=True, env=env, check=False
    ).stdout
    for line in out.splitlines():
        node, _, reason = line.partition("|")
        if reason.startswith("sickbay"):
            subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=env, check=False)


@pytest.fixture(scope="session")
def clickhouse_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """chdb allows one data path per process, so the whole session shares one; tests use their own database."""
    url = os.environ.get("CLICKHOUSE_URL")
    if url:
        yield url
        return
    if docker_available():
        from testcontainers.clickhouse import ClickHouseContainer

        with ClickHouseContainer() as container:
            yield container.get_connection_url().replace("clickhouse://", "http://")
        return
    try:
        import chdb  # noqa: F401
    except ImportError as exc:
        pytest.fail(
            f"no ClickHouse: CLICKHOUSE_URL is unset, no Docker daemon, and chdb is not installed ({exc})"
        )
    yield f"chdb://{tmp_path_factory.mktemp('chdb')}"
