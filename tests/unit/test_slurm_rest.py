"""slurmrestd executor against an exchange recorded from the local Slurm 22.05.8 slurmrestd (openapi/v0.0.38).

The bodies below are the real responses, trimmed to the fields the adapter reads
(recorded with curl over the deploy/local/slurmrestd.sh socket). The live path is
tests/integration/test_slurm_modes.py; these pin the mapping, the errors, the
JWT headers and the operations 22.05 has no endpoint for.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest
from pydantic import SecretStr

from connectors.actuators.slurm_adapter import SlurmAdapter
from connectors.actuators.slurm_rest import SlurmRest
from schemas.actions import ActionKind, ActionStatus
from tests.factories import slurm_action

REASON = "sickbay: Xid 79 [inc-rec] expires 2026-11-29T21:00:00Z"
RECORDED: dict[tuple[str, str], tuple[int, dict[str, object]]] = {
    ("GET", "/slurm/v0.0.38/node/gpu-03"): (
        200,
        {
            "errors": [],
            "nodes": [{"name": "gpu-03", "state": "mixed", "state_flags": ["DRAIN"], "reason": REASON}],
        },
    ),
    ("GET", "/slurm/v0.0.38/node/gpu-01"): (
        200,
        {"errors": [], "nodes": [{"name": "gpu-01", "state": "idle", "state_flags": [], "reason": ""}]},
    ),
    ("GET", "/slurm/v0.0.38/nodes"): (
        200,
        {
            "errors": [],
            "nodes": [
                {"name": "gpu-01", "state": "idle", "state_flags": [], "reason": ""},
                {"name": "gpu-03", "state": "mixed", "state_flags": ["DRAIN"], "reason": REASON},
            ],
        },
    ),
    ("GET", "/slurm/v0.0.38/job/32"): (
        200,
        {
            "errors": [],
            "jobs": [
                {
                    "job_id": 32,
                    "name": "sickbay-act-test-record",
                    "job_state": "RUNNING",
                    "state_reason": "None",
                    "excluded_nodes": "",
                    "restart_cnt": 0,
                    "requeue": True,
                    "nodes": "gpu-03",
                }
            ],
        },
    ),
    ("GET", "/slurm/v0.0.38/node/gpu-99"): (
        500,
        {"errors": [{"error": "Invalid node name specified", "errno": 2018}], "nodes": []},
    ),
    ("GET", "/slurm/v0.0.38/job/999999"): (
        500,
        {
            "errors": [
                {
                    "description": "Unable to find JobId=999999",
                    "error_number": 2017,
                    "error": "Invalid job id specified",
                    "source": "slurm_load_job",
                }
            ],
            "jobs": [],
        },
    ),
    ("DELETE", "/slurm/v0.0.38/job/32"): (200, {"errors": []}),
}


class Recorded:
    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        key = (request.method, request.url.path)
        if key not in RECORDED:
            return httpx.Response(404, json={"errors": [{"error": "no recorded answer"}]})
        status, body = RECORDED[key]
        return httpx.Response(status, json=body)


def rest(handler: Callable[[httpx.Request], httpx.Response], **kw: object) -> SlurmRest:
    return SlurmRest("http://ctl:6820", transport=httpx.MockTransport(handler), **kw)  # type: ignore[arg-type]


def test_nodes_and_jobs_map_to_the_scontrol_fields_the_adapter_reads():
    r = rest(Recorded())
    _, node = r.show("node", "gpu-03")
    assert node == {"NodeName": "gpu-03", "State": "MIXED+DRAIN", "Reason": REASON}
    _, job = r.show("job", "32")
    assert job is not None
    assert (job["JobState"], job["Restarts"], job["Requeue"], job["ExcNodeList"]) == (
        "RUNNING",
        "0",
        "1",
        "(null)",
    )
    _, nodes = r.list_nodes()
    assert [n["NodeName"] for n in nodes] == ["gpu-01", "gpu-03"]


@pytest.mark.parametrize(
    ("kind", "fields", "said"),
    [
        (
            ActionKind.DRAIN_NODE,
            {"node": "gpu-99"},
            "unknown node: node gpu-99 not found (Invalid node name specified",
        ),
        (
            ActionKind.CANCEL_JOB,
            {"job_id": "999999"},
            "unknown job: job 999999 not found (Invalid job id specified",
        ),
    ],
)
def test_an_unknown_node_or_job_is_rejected_with_slurmrestds_error(kind, fields, said):
    result = SlurmAdapter(rest(Recorded()), sleep=lambda _: None).handle(slurm_action(kind, **fields))
    assert result.status == ActionStatus.REJECTED
    assert result.detail.startswith(said)


def test_cancel_is_a_delete_on_the_job():
    handler = Recorded()
    result = SlurmAdapter(rest(handler)).handle(slurm_action(ActionKind.CANCEL_JOB, job_id="32"))
    assert result.status == ActionStatus.SUCCEEDED, result.detail
    assert [(q.method, q.url.path) for q in handler.requests] == [
        ("GET", "/slurm/v0.0.38/job/32"),
        ("DELETE", "/slurm/v0.0.38/job/32"),
    ]
    assert result.commands[-1].argv == ["DELETE", "/slurm/v0.0.38/job/32"]


@pytest.mark.parametrize(
    ("kind", "fields", "why"),
    [
        (ActionKind.DRAIN_NODE, {"node": "gpu-01"}, "no node update endpoint"),
        (ActionKind.REQUEUE_JOB, {"job_id": "32", "exclude_nodes": ["gpu-03"]}, "no requeue endpoint"),
    ],
)
def test_operations_22_05_has_no_endpoint_for_are_rejected_and_say_so(kind, fields, why):
    handler = Recorded()
    result = SlurmAdapter(rest(handler)).handle(slurm_action(kind, **fields))
    assert result.status == ActionStatus.REJECTED
    assert result.detail.startswith("rest mode: ") and why in result.detail
    assert all(q.method == "GET" for q in handler.requests)  # observed, changed nothing


def test_v0_0_39_drains_with_a_node_update_carrying_state_and_reason():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "GET":
            return httpx.Response(
                200, json={"errors": [], "nodes": [{"name": "gpu-01", "state": ["IDLE"], "reason": ""}]}
            )
        return httpx.Response(200, json={"errors": []})

    result = SlurmAdapter(rest(handler, api="v0.0.39")).handle(
        slurm_action(ActionKind.DRAIN_NODE, node="gpu-01", reason="sickbay: Xid 79 [inc-1]")
    )
    assert result.status == ActionStatus.SUCCEEDED, result.detail
    assert seen[-1].method == "POST" and seen[-1].url.path == "/slurm/v0.0.39/node/gpu-01"
    assert json.loads(seen[-1].content) == {"state": ["DRAIN"], "reason": "sickbay: Xid 79 [inc-1]"}


def test_a_jwt_is_sent_in_slurms_headers_and_never_recorded():
    handler = Recorded()
    token = "eyJhbGciOiJIUzI1NiJ9.secret-part.sig"  # noqa: S105 - a fake token
    r = rest(handler, user="sickbay", token=SecretStr(token))
    result = SlurmAdapter(r).handle(slurm_action(ActionKind.CANCEL_JOB, job_id="32"))
    assert handler.requests[0].headers["X-SLURM-USER-NAME"] == "sickbay"
    assert handler.requests[0].headers["X-SLURM-USER-TOKEN"] == token
    assert token not in result.model_dump_json()


def test_a_token_without_its_user_is_refused():
    with pytest.raises(ValueError, match="needs the user"):
        SlurmRest("http://ctl:6820", token=SecretStr("t"))


def test_an_unreachable_slurmrestd_is_retried_then_failed_with_the_address():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    sleeps: list[float] = []
    result = SlurmAdapter(rest(refuse), retries=1, backoff_s=0.2, sleep=sleeps.append).handle(
        slurm_action(ActionKind.CANCEL_JOB, job_id="32")
    )
    assert result.status == ActionStatus.FAILED
    assert "slurmrestd at http://ctl:6820 unreachable: ConnectError" in result.detail
    assert "(after 2 attempts)" in result.detail and sleeps == [0.2]


def test_an_http_error_without_a_slurm_body_is_reported_with_its_status():
    result = SlurmAdapter(rest(lambda q: httpx.Response(403, text="forbidden"))).handle(
        slurm_action(ActionKind.CANCEL_JOB, job_id="32")
    )
    assert result.status == ActionStatus.FAILED
    assert "HTTP 403 Forbidden" in result.detail
