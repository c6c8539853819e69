"""The broker restarts mid-stream: every line still reaches the consumer exactly once.

This test stops and starts a broker, so it never uses the shared one: it starts its
OWN single-node Kafka with deploy/local/kafka.sh on other ports
(``SICKBAY_TEST_RESTART_KAFKA_PORT``, default: the first free pair from 29192, controller +1) and its own data
dir, and removes it afterwards. It fails, with the script's output, when that broker
cannot start (Java 17 and the cached Kafka jars are needed).
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from connectors.kafka import ReliableProducer, consumer_config, ensure_topics, wait_for_broker
from connectors.sources.files import FileCollector
from connectors.sources.spool import Spool
from schemas.topics import TopicSpec
from streams.extract.normalize import normalize_all
from streams.settings import REPO_ROOT

pytestmark = pytest.mark.integration

KAFKA_SH = REPO_ROOT / "deploy" / "local" / "kafka.sh"


class OwnBroker:
    def __init__(self, stack_dir: Path, port: int) -> None:
        self.port = port
        self.bootstrap = f"127.0.0.1:{port}"
        self.env = {
            **os.environ,
            "SICKBAY_STACK_DIR": str(stack_dir),
            "SICKBAY_KAFKA_PORT": str(port),
            "SICKBAY_KAFKA_CONTROLLER_PORT": str(port + 1),
            "SICKBAY_KAFKA_HEAP": "-Xms128m -Xmx384m",
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(KAFKA_SH), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def up(self) -> None:
        out = self.run("up")
        if out.returncode != 0:
            pytest.fail(
                f"could not start this test's own Kafka on {self.bootstrap} with deploy/local/kafka.sh "
                f"(needs Java 17 and the Kafka jars; set SICKBAY_TEST_RESTART_KAFKA_PORT if the port is taken):\n"
                f"{out.stdout}\n{out.stderr}"
            )

    def down(self) -> None:
        self.run("down")


def _free_port_pair(start: int = 29192, tries: int = 200) -> int:
    """A port p with p and p + 1 free. Below the kernel's ephemeral range (32768 and up on Linux), so
    a client socket cannot hold it by chance between this check and the broker's bind (a fixed
    49192 once failed CI that way)."""
    for port in range(start, start + 2 * tries, 2):
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    pytest.fail(f"no two free ports in {start}..{start + 2 * tries}; set SICKBAY_TEST_RESTART_KAFKA_PORT")


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnBroker]:
    env_port = os.environ.get("SICKBAY_TEST_RESTART_KAFKA_PORT")
    port = int(env_port) if env_port else _free_port_pair()
    broker = OwnBroker(tmp_path_factory.mktemp("own-kafka"), port)
    broker.up()
    wait_for_broker(broker.bootstrap, 60)
    try:
        yield broker
    finally:
        broker.run("down", "--purge")


def _consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 90.0) -> Counter[str]:
    consumer = Consumer(consumer_config(bootstrap, f"it-{uuid.uuid4().hex}", "it-restart"))
    consumer.subscribe([topic])
    seen: Counter[str] = Counter()
    deadline = time.monotonic() + timeout_s
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                if sum(seen.values()) >= expected:
                    quiet_until = quiet_until or time.monotonic() + 3.0  # linger: catch duplicates too
                    if time.monotonic() >= quiet_until:
                        break
                continue
            for line in normalize_all(msg.value() or b""):
                seen[line.text] += 1
    finally:
        consumer.close()
    return seen


def _writer(path: Path, total: int, per_s: float, done: threading.Event) -> Callable[[], None]:
    def write() -> None:
        with open(path, "a") as fh:
            for i in range(total):
                fh.write(f"seq={i:06d} [rank3]: NCCL watchdog heartbeat line for the restart test\n")
                if i % 50 == 0:
                    fh.flush()
                    time.sleep(50 / per_s)
        done.set()

    return write


def _collector(bootstrap: str, topic: str, log: Path, state: Path) -> FileCollector:
    producer = ReliableProducer(bootstrap, "it-restart-collector", spool=Spool(state / "spool"))
    return FileCollector(
        producer,
        topic,
        [str(log.parent / "*.log")],
        host="gpu-01",
        offsets=state / "offsets.json",
        lines_per_record=7,
    )


def test_a_broker_restart_mid_stream_loses_and_duplicates_no_line(
    own_broker: OwnBroker, tmp_path: Path
) -> None:
    topic = f"it{uuid.uuid4().hex[:8]}.raw.logs"
    ensure_topics(own_broker.bootstrap, [TopicSpec(name=topic, key="host", value="raw", partitions=2)])
    log, state = tmp_path / "logs" / "train.log", tmp_path / "state"
    log.parent.mkdir()
    total = 12_000
    done = threading.Event()
    threading.Thread(target=_writer(log, total, per_s=800.0, done=done), daemon=True).start()

    collector = _collector(own_broker.bootstrap, topic, log, state)
    started = time.monotonic()
    restarted = False
    restarts_of_collector = 0
    lines_before = 0  # lines the first collector process read (all delivered or spooled at its close)

    def caught_up() -> bool:
        return lines_before + collector.stats.lines == total and collector.producer.mode == "direct"

    while not (done.is_set() and restarted and caught_up()):
        collector.step()
        time.sleep(0.01)
        if not restarted and collector.stats.lines > 2_000:
            own_broker.down()  # the broker goes away with records in flight
            t0 = time.monotonic()
            while time.monotonic() - t0 < 3.0:  # keep collecting while it is down: lines go to the spool
                collector.step()
                time.sleep(0.01)
            assert collector.producer.mode == "spooling"
            # The collector itself restarts during the outage: spool and offsets must agree.
            assert collector.close(timeout_s=5.0) == 0
            spooled_before_restart = collector.producer.spooled
            lines_before = collector.stats.lines
            collector = _collector(own_broker.bootstrap, topic, log, state)
            restarts_of_collector += 1
            assert collector.producer.spool is not None and collector.producer.spool.depth > 0
            threading.Thread(target=own_broker.up, daemon=True).start()
            restarted = True
        assert time.monotonic() - started < 240, f"stuck: {collector.report().model_dump()}"
    assert collector.close(timeout_s=60.0) == 0
    assert spooled_before_restart > 0 and restarts_of_collector == 1
    assert collector.producer.replayed > 0

    seen = _consume_all(own_broker.bootstrap, topic, total)
    expected = {
        f"seq={i:06d} [rank3]: NCCL watchdog heartbeat line for the restart test" for i in range(total)
    }
    missing = expected - set(seen)
    duplicated = {k: n for k, n in seen.items() if n > 1}
    assert not missing, f"{len(missing)} lines lost, e.g. {sorted(missing)[:3]}"
    assert not duplicated, f"{len(duplicated)} lines duplicated, e.g. {list(duplicated.items())[:3]}"
    assert set(seen) == expected
