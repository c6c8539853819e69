"""The console end to end: headless Chromium against the API, over a store the real sink filled."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from connectors.api.app import ApiConfig, create_app
from connectors.api.publisher import MemoryPublisher
from connectors.api.store import Store
from schemas import codec
from schemas.actions import Mode
from schemas.topics import TopicCatalog
from tests.analytics.browser import chromium, click, screenshot, serve_in_thread, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture(scope="module")
def console(seeded, ch_client):
    db, fleet = seeded
    publisher = MemoryPublisher()
    config = ApiConfig(
        cluster="c1", default_mode=Mode.OBSERVE, topics=TopicCatalog(prefix="ui"), token=SecretStr("s3cret")
    )
    with serve_in_thread(create_app(Store(ch_client, db), publisher, config)) as url:
        yield url, fleet, publisher


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


def test_the_incident_page_shows_root_cause_cascade_evidence_actions_and_audit(console, browser):
    url, fleet, _ = console
    incident = fleet.latest("42")
    browser.get(f"{url}/console/#/incidents")
    row = wait_for(browser, "#incidents tbody tr", "gpu-03")  # job 42's incident in the timeline
    assert "Xid 79" in row.text and "42" in row.text
    screenshot(browser, "console-timeline.png")
    click(browser, f'#incidents tbody tr a[href="#/incident/{incident.incident_id}"]')

    title = wait_for(browser, "#incident-title", "Xid 79")
    assert browser.current_url.endswith(f"#/incident/{incident.incident_id}")
    root = wait_for(browser, "#root-cause")
    assert "gpu.xid" in root.text and "code 79" in root.text and "gpu-03" in root.text
    assert "NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus." in root.text
    cascade = wait_for(browser, "#cascade", "NCCL watchdog timeout")
    assert "gpu-01" in cascade.text and "gpu-04" in cascade.text
    evidence = wait_for(browser, "#evidence")
    lines = evidence.text.splitlines()
    assert any("NVRM: Xid" in line and "gpu-03" in line for line in lines)
    assert len(incident.evidence) >= 2
    for ev in incident.evidence:  # every evidence line of the stored incident, with its node
        assert any(ev.text in line and (ev.node or "?") in line for line in lines), ev.text
    assert any("Watchdog caught collective operation timeout" in line for line in lines)
    actions = wait_for(browser, "#actions", "drain node")
    assert "gpu-03" in actions.text and "requeue job" in actions.text and "succeeded" in actions.text
    audit = wait_for(browser, "#audit", "action.succeeded")
    assert "adapter.slurm" in audit.text and "action.proposed" in audit.text
    assert "Xid 79" in title.text
    shot = screenshot(browser, "console-incident.png")
    assert shot.stat().st_size > 20_000


def test_an_advisory_action_is_approved_from_the_incident_page(console, browser):
    url, fleet, publisher = console
    advice = fleet.latest("43")
    browser.get(f"{url}/console/#/incident/{advice.incident_id}")
    wait_for(browser, "#actions", "advice (dry run)")
    browser.find_element("id", "token").send_keys("s3cret")
    browser.find_element("id", "actor").send_keys("alice")
    browser.find_element("css selector", "#auth button").click()
    click(browser, "#actions button.approve")
    browser.switch_to.alert.accept()
    wait_for(browser, "#flash", "Published to ui.actions")
    published = [codec.loads(v) for topic, _k, v in publisher.records if topic == "ui.actions"]
    assert published[-1]["dry_run"] is False and published[-1]["mode"] == "act"
    assert published[-1]["node"] == "gpu-06" and published[-1]["action_id"].startswith("apv-")
    audits = [codec.loads(v) for topic, _k, v in publisher.records if topic == "ui.audit"]
    assert audits[-1]["event"] == "action.approved" and audits[-1]["actor"] == "api:alice"


def test_quarantine_board_job_history_fleet_charts_and_modes_render(console, browser):
    url, _fleet, _ = console
    browser.get(f"{url}/console/#/nodes")
    board = wait_for(browser, ".board", "Isolated")
    isolated = board.find_elements("css selector", ".col")[0].text
    assert "gpu-03" in isolated and "gpu-06" in isolated
    screenshot(browser, "console-nodes.png")

    browser.get(f"{url}/console/#/job/42")
    attempts = wait_for(browser, "#attempts", "gpu-05")
    assert "#1" in attempts.text and "#2" in attempts.text and "Xid 79" in attempts.text
    screenshot(browser, "console-job.png")

    browser.get(f"{url}/console/#/fleet")
    wait_for(browser, "main", "TOP FAILING NODES")  # h2 is upper-cased by CSS
    assert len(browser.find_elements("css selector", "main svg rect")) >= 5
    screenshot(browser, "console-fleet.png")

    browser.get(f"{url}/console/#/modes")
    modes = wait_for(browser, "#modes", "observe")
    assert "c1/*/*" in modes.text
