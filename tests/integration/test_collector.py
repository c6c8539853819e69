from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Consumer

from connectors.kafka import consumer_config, ensure_topics
from schemas import codec
from schemas.topics import TopicCatalog
from streams.settings import REPO_ROOT

pytestmark = pytest.mark.integration


def test_collect_file_forwards_shipper_json_unchanged_and_wraps_plain_lines(kafka_bootstrap, tmp_path):
    prefix = f"it{uuid.uuid4().hex[:8]}"
    cat = TopicCatalog(prefix=prefix, partitions=2, app_id=prefix)
    ensure_topics(kafka_bootstrap, cat.all())
    fluent = b'{"@timestamp":1764417600.5,"log":"NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.","hostname":"gpu-03"}'
    path = tmp_path / "slurm-77.out"
    path.write_bytes(fluent + b"\n[Rank 1] some plain line\n\n")
    env = {
        "SICKBAY_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "SICKBAY_TOPIC_PREFIX": cat.prefix,
        "SICKBAY_PARTITIONS": "2",
        "PATH": "/usr/bin:/bin",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "collect", "file", str(path), "--host", "gpu-01"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "collected 2 lines (1 shipper records, 1 plain)" in proc.stderr
    consumer = Consumer(consumer_config(kafka_bootstrap, f"it-{uuid.uuid4().hex}", "it"))
    consumer.subscribe([cat.raw_logs.name])
    got = []
    for _ in range(60):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.key(), msg.value()))
        if len(got) == 2:
            break
    consumer.close()
    by_key = dict(got)
    assert by_key[b"gpu-03"] == fluent  # byte for byte
    wrapped = codec.loads(by_key[b"gpu-01"])
    assert (wrapped["line"], wrapped["host"], wrapped["job_id"], wrapped["line_no"]) == (
        "[Rank 1] some plain line",
        "gpu-01",
        "77",
        2,
    )


def test_collect_file_reports_a_missing_file_clearly():
    proc = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "collect", "file", "/nonexistent/x.log"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "no such file: /nonexistent/x.log" in proc.stderr
