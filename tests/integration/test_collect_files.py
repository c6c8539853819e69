"""`sickbay collect files` as a process against the real broker: restarts, rotation, SIGTERM, coverage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from connectors.kafka import consumer_config, ensure_topics
from schemas import codec
from schemas.collector import CollectorReport
from schemas.topics import TopicCatalog
from streams.extract.normalize import normalize_all
from streams.settings import REPO_ROOT

pytestmark = pytest.mark.integration


def _env(bootstrap: str, cat: TopicCatalog) -> dict[str, str]:
    return {
        "SICKBAY_KAFKA_BOOTSTRAP": bootstrap,
        "SICKBAY_TOPIC_PREFIX": cat.prefix,
        "SICKBAY_PARTITIONS": "2",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }


def _reports(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0) -> list[CollectorReport]:
    """The coverage reports the collector published (the sink stores them; the API shows them)."""
    consumer = Consumer(consumer_config(bootstrap, f"it-{uuid.uuid4().hex}", "it-files"))
    consumer.subscribe([topic])
    out: list[CollectorReport] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(CollectorReport.model_validate_json(msg.value() or b""))
    finally:
        consumer.close()
    return out


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "streams.cli.main", "collect", "files", *args]


def _texts(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> Counter[str]:
    consumer = Consumer(consumer_config(bootstrap, f"it-{uuid.uuid4().hex}", "it-files"))
    consumer.subscribe([topic])
    seen: Counter[str] = Counter()
    deadline = time.monotonic() + timeout_s
    settle = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                for line in normalize_all(msg.value() or b"", (msg.key() or b"").decode() or None):
                    seen[line.text] += 1
            elif sum(seen.values()) >= expected:
                settle = settle or time.monotonic() + 2.0  # a little longer, to catch duplicates
                if time.monotonic() >= settle:
                    break
    finally:
        consumer.close()
    return seen


@pytest.fixture
def catalog(kafka_bootstrap: str) -> TopicCatalog:
    prefix = f"it{uuid.uuid4().hex[:8]}"
    cat = TopicCatalog(prefix=prefix, partitions=2, app_id=prefix)
    ensure_topics(kafka_bootstrap, [cat.raw_logs, cat.collector_reports])
    return cat


@pytest.mark.parametrize("lines_per_record", [1, 5])
def test_two_runs_over_a_growing_glob_deliver_every_line_exactly_once(
    kafka_bootstrap: str, catalog: TopicCatalog, tmp_path: Path, lines_per_record: int
) -> None:
    logs, state = tmp_path / "logs", tmp_path / "state"
    logs.mkdir()
    (logs / "slurm-501.out").write_text("".join(f"job line {i}\n" for i in range(30)))
    args = [str(logs / "*.out"), "--once", "--host", "gpu-02", "--state-dir", str(state)]
    args += ["--lines-per-record", str(lines_per_record)]
    env = _env(kafka_bootstrap, catalog)
    first = subprocess.run(
        _cli(*args), capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120, check=False
    )
    assert first.returncode == 0, first.stderr
    with open(logs / "slurm-501.out", "a") as fh:
        fh.write("".join(f"job line {i}\n" for i in range(30, 40)))
    (logs / "slurm-502.out").write_text("other job\n")
    second = subprocess.run(
        _cli(*args), capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120, check=False
    )
    assert second.returncode == 0, second.stderr
    assert "collected 11 lines" in second.stderr
    seen = _texts(kafka_bootstrap, catalog.raw_logs.name, 41)
    assert seen == Counter({**{f"job line {i}": 1 for i in range(40)}, "other job": 1})
    assert (state / "offsets.json").is_file()
    reports = _reports(kafka_bootstrap, catalog.collector_reports.name, 2)
    assert [(r.collector, r.host, r.final) for r in reports] == [("files", "gpu-02", True)] * 2


def test_follow_survives_rotation_and_stops_cleanly_on_sigterm_with_a_final_report(
    kafka_bootstrap: str, catalog: TopicCatalog, tmp_path: Path
) -> None:
    logs, state, report = tmp_path / "logs", tmp_path / "state", tmp_path / "report.json"
    logs.mkdir()
    log = logs / "train.log"
    log.write_text("before rotation 0\nbefore rotation 1\n")
    proc = subprocess.Popen(
        _cli(
            str(logs / "*.log"), "--host", "gpu-03", "--state-dir", str(state), "--report-file", str(report)
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(kafka_bootstrap, catalog),
        cwd=REPO_ROOT,
    )
    try:
        time.sleep(3.0)
        os.rename(log, logs / "train.log.1")
        log.write_text("after rotation 0\n")
        with open(logs / "train.log.1", "a") as old:
            old.write("before rotation 2 (late write to the old file)\n")
        seen = _texts(kafka_bootstrap, catalog.raw_logs.name, 4, timeout_s=30)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert seen == Counter(
        [
            "before rotation 0",
            "before rotation 1",
            "before rotation 2 (late write to the old file)",
            "after rotation 0",
        ]
    )
    final = CollectorReport.model_validate(codec.loads(report.read_bytes()))
    assert final.final and final.broker_reachable and final.spool_depth == 0
    assert final.counts["lines"] == 4 and final.counts["rotations"] == 1
    assert "coverage {" in err


def test_once_over_paths_that_match_nothing_fails_with_a_clear_message(
    kafka_bootstrap: str, catalog: TopicCatalog, tmp_path: Path
) -> None:
    proc = subprocess.run(
        _cli(str(tmp_path / "nothing-*.log"), "--once", "--state-dir", str(tmp_path / "state")),
        capture_output=True,
        text=True,
        env=_env(kafka_bootstrap, catalog),
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert f"no file matched: {tmp_path / 'nothing-*.log'}" in proc.stderr
    assert '"unmatched":["' in proc.stderr  # the final coverage report names it too
