"""After ``sickbay demo``, the console shows the demo incident with its evidence and actions.

Runs the demo as ``make demo`` does (every role its own process, real Kafka, Faust,
Slurm and chdb) into a fresh embedded store, then ``sickbay api`` over that store
(the demo's sink has exited, so the API process may own it) and headless Chromium.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest

from schemas import codec
from streams.settings import REPO_ROOT
from tests.analytics.browser import chromium, click, free_port, screenshot, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"sickbay api exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"{url} did not answer")


def test_the_console_shows_the_demo_incident_with_evidence_and_actions(kafka_bootstrap, slurm_conf, tmp_path):
    env = {
        **os.environ,
        "SICKBAY_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "SICKBAY_CHDB_PATH": str(tmp_path / "chdb"),
        "SICKBAY_API_TOKEN": "",
        "SICKBAY_API_READ_TOKEN": "",
    }
    env.pop("CLICKHOUSE_URL", None)
    for key in ("SICKBAY_API_TOKEN", "SICKBAY_API_READ_TOKEN"):
        env.pop(key)
    demo = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "demo"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=400,
        check=False,
    )
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-6000:]
    summary = codec.loads(demo.stdout.strip().splitlines()[-1])
    incident_id, job_id = summary["incident_id"], summary["job_id"]

    port = free_port()
    log = (tmp_path / "api.log").open("wb")
    api = subprocess.Popen(
        [sys.executable, "-m", "streams.cli.main", "api", "--no-kafka", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO_ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/healthz", api)
        with chromium(tmp_path) as browser:
            browser.get(f"{url}/console/#/incidents")
            row = wait_for(browser, "#incidents tbody tr", "gpu-03")
            assert job_id in row.text
            click(browser, f'#incidents tbody tr a[href="#/incident/{incident_id}"]')
            wait_for(browser, "#incident-title", "Xid 79")
            assert browser.current_url.endswith(f"#/incident/{incident_id}")
            root = wait_for(browser, "#root-cause", "gpu-03")
            assert "gpu.xid" in root.text and "NVRM: Xid" in root.text
            evidence = wait_for(browser, "#evidence", "NVRM: Xid")
            assert "Watchdog caught collective operation timeout" in evidence.text
            actions = wait_for(browser, "#actions", "drain node")
            # executed, then confirmed by a fresh scheduler observation (the runner's reconciliation)
            assert "requeue job" in actions.text and (
                "succeeded" in actions.text or "converged" in actions.text
            )
            wait_for(browser, "#audit", "adapter.slurm")
            screenshot(browser, "console-demo-incident.png")
    finally:
        api.terminate()
        api.wait(30)
        log.close()
