"""The adapter's pure parts (names, affinity merge, retries): no API server needed."""

from __future__ import annotations

import httpx2
import pytest

from connectors.actuators.kubernetes_adapter import KubernetesAdapter, _with_exclusion, excludes
from connectors.actuators.kubernetes_client import (
    BadName,
    CallLog,
    KubeCallFailed,
    check_label,
    check_subdomain,
    label_value,
    make_client,
)
from schemas.actions import ActionKind, ActionStatus
from tests.kubernetes.conftest import k8s_action


@pytest.mark.parametrize("name", ["gpu-01", "node.rack-3.example", "a"])
def test_valid_node_names_pass(name: str):
    assert check_subdomain("node", name) == name


@pytest.mark.parametrize("name", ["", "GPU-01", "gpu_01", "-gpu", "gpu-", "a/b", "x" * 254, "gpu 01", None])
def test_invalid_names_are_refused_before_any_call(name: str | None):
    with pytest.raises(BadName):
        check_subdomain("node", name)


def test_namespaces_are_dns_labels():
    assert check_label("namespace", "team-a") == "team-a"
    with pytest.raises(BadName):
        check_label("namespace", "team.a")


def test_free_text_reasons_become_valid_taint_values():
    assert label_value("xid 79: GPU fell off the bus") == "xid-79-GPU-fell-off-the-bus"
    assert label_value("!!!") == "unspecified"
    assert len(label_value("x" * 100)) == 63


def test_exclusion_is_anded_into_every_term_and_widens_an_existing_one():
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["a"]}
                        ]
                    },
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
                ]
            }
        },
        "podAntiAffinity": {"kept": True},
    }
    out = _with_exclusion(aff, ["b"])
    terms = out["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["a", "b"]}
    ]
    assert terms[1]["matchExpressions"][1] == {
        "key": "kubernetes.io/hostname",
        "operator": "NotIn",
        "values": ["b"],
    }
    assert out["podAntiAffinity"] == {"kept": True}
    assert excludes(out, ["b"]) and not excludes(aff, ["b"]) and not excludes(None, ["b"])


def test_transient_errors_are_retried_with_backoff_and_recorded():
    calls = CallLog([], attempts=4, backoff_s=0.01)
    tries = iter([httpx2.ConnectError("refused"), httpx2.ReadTimeout("slow"), "ok"])

    def flaky() -> str:
        item = next(tries)
        if isinstance(item, Exception):
            raise item
        return item

    assert calls.call("GET", "/api/v1/nodes/x", flaky) == "ok"
    assert [r.returncode for r in calls.runs] == [-1, -1, 0]
    assert "attempt 1: refused" in calls.runs[0].stderr


def test_an_unreachable_api_server_fails_the_action_with_every_attempt_recorded(tmp_path, monkeypatch):
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\n"
        "    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: not-a-secret\n"
        "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
    )
    adapter = KubernetesAdapter(make_client(str(cfg), timeout_s=1), attempts=3, backoff_s=0.01)

    result = adapter.handle(k8s_action(ActionKind.DRAIN_NODE, node="gpu-01"))

    assert result.status == ActionStatus.FAILED
    assert result.detail.startswith("GET /api/v1/nodes/gpu-01:")
    assert [(r.argv, r.returncode) for r in result.commands] == [(["GET", "/api/v1/nodes/gpu-01"], -1)] * 3
    assert "not-a-secret" not in result.model_dump_json()


def test_call_failures_that_are_not_transient_are_not_retried():
    from lightkube import ApiError

    calls = CallLog([], attempts=4, backoff_s=0.01)
    request = httpx2.Request("GET", "https://x/api/v1/nodes/y")
    response = httpx2.Response(
        404, request=request, json={"kind": "Status", "code": 404, "message": 'nodes "y" not found'}
    )

    def missing() -> None:
        raise ApiError(request=request, response=response)

    with pytest.raises(KubeCallFailed) as info:
        calls.call("GET", "/api/v1/nodes/y", missing)
    assert info.value.code == 404 and len(calls.runs) == 1
