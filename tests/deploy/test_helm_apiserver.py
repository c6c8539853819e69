"""The rendered chart against a real kube-apiserver (deploy/local/kube.sh, or ``SICKBAY_KUBECONFIG``):
every manifest passes a server-side dry-run apply, and the adapter's RBAC, applied for real, allows
exactly the adapter's calls and nothing else (SubjectAccessReview under the RBAC authorizer)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, codecs
from lightkube.core.resource import NamespacedResource
from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
from lightkube.resources.authorization_v1 import SubjectAccessReview

from connectors.actuators.kubernetes_client import make_client
from streams.settings import REPO_ROOT
from tests.deploy.test_helm import _adapter_calls

pytestmark = pytest.mark.integration

KUBE_SH = REPO_ROOT / "deploy" / "local" / "kube.sh"
NAMESPACE = "default"  # exists on every API server; nothing reconciles it here (no controller-manager)


@pytest.fixture(scope="module")
def api() -> Iterator[Client]:
    env = os.environ.get("SICKBAY_KUBECONFIG")
    started = False
    if env:
        path = Path(env)
        if not path.is_file():
            pytest.fail(f"SICKBAY_KUBECONFIG={env} is not a file")
    else:
        was_running = subprocess.run(["bash", str(KUBE_SH), "status"], capture_output=True, check=False)
        up = subprocess.run(
            ["bash", str(KUBE_SH), "up"], capture_output=True, text=True, timeout=5400, check=False
        )
        if up.returncode != 0:
            pytest.fail(
                "no Kubernetes API server for the chart's dry-run: SICKBAY_KUBECONFIG is unset and "
                f"deploy/local/kube.sh up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
            )
        started = was_running.returncode != 0
        line = next((x for x in up.stdout.splitlines() if x.startswith("export SICKBAY_KUBECONFIG=")), "")
        path = (
            Path(line.split("=", 1)[1].strip("'\"")) if line else REPO_ROOT / ".cache" / "kube" / "kubeconfig"
        )
    client = make_client(str(path))
    yield client
    client.close()
    if started:
        subprocess.run(["bash", str(KUBE_SH), "down"], capture_output=True, timeout=120, check=False)


def _objects(docs: list[dict[str, Any]]) -> list[Any]:
    objs = codecs.load_all_yaml(yaml.safe_dump_all(docs))
    for obj in objs:
        if isinstance(obj, NamespacedResource) and obj.metadata is not None:
            obj.metadata.namespace = NAMESPACE
    return objs


def test_every_rendered_manifest_passes_a_server_side_dry_run(api, render):
    docs = render("--set", "roles.collect-nvml.enabled=true", namespace=NAMESPACE)
    kinds = set()
    for obj in _objects(docs):
        applied = api.apply(obj, field_manager="sickbay-chart-test", dry_run=True, force=True)
        assert applied.metadata.name == obj.metadata.name
        kinds.add(type(obj).__name__)
    assert {"StatefulSet", "DaemonSet", "Deployment", "Job", "ClusterRole", "PodDisruptionBudget"} <= kinds


def _allowed(api: Client, user: str, resource: str, verb: str) -> bool:
    group = {
        "pytorchjobs": "kubeflow.org",
        "trainjobs": "trainer.kubeflow.org",
        "workloads": "kueue.x-k8s.io",
    }
    review = SubjectAccessReview(
        spec=SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
            resourceAttributes=ResourceAttributes(
                group=group.get(resource, ""), resource=resource, verb=verb, namespace="team-a"
            ),
        )
    )
    result = api.create(review)
    return bool(result.status and result.status.allowed)


def test_the_adapter_account_may_make_its_calls_and_nothing_more(api, render):
    release = f"rbac{uuid.uuid4().hex[:6]}"
    docs = [
        d
        for d in render(release=release, namespace=NAMESPACE)
        if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
        and d["metadata"]["labels"]["app.kubernetes.io/component"] == "adapter-kubernetes"
    ]
    assert len(docs) == 3
    objs = _objects(docs)
    try:
        for obj in objs:
            api.apply(obj, field_manager="sickbay-chart-test", force=True)
        user = f"system:serviceaccount:{NAMESPACE}:{release}-sickbay-adapter-kubernetes"
        calls = _adapter_calls()
        for resource, verb in sorted(calls):
            assert _allowed(api, user, resource, verb), (resource, verb)
        denied = [
            ("nodes", "delete"),
            ("pods", "create"),
            ("pods", "update"),
            ("secrets", "get"),
            ("configmaps", "list"),
            ("pytorchjobs", "delete"),
            ("events", "delete"),
        ]
        for resource, verb in denied:
            assert (resource, verb) not in calls
            assert not _allowed(api, user, resource, verb), (resource, verb)
    finally:
        for obj in reversed(objs):
            ns = NAMESPACE if isinstance(obj, NamespacedResource) else None
            api.delete(type(obj), obj.metadata.name, namespace=ns)
