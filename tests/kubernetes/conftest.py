"""A real kube-apiserver + etcd for the Kubernetes adapter and collector tests.

``SICKBAY_KUBECONFIG`` names a running API server; otherwise ``deploy/local/kube.sh up`` builds
kube-apiserver once (cached under ~/.cache/sickbay/kube/<version>/; the first build is long on 2 cores)
and starts it with etcd. When neither works the tests FAIL with what is missing; they never skip.
There is no kubelet: Nodes and Pods are created by hand, and nothing reconciles them.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Namespace, Node, Pod

from connectors.actuators.kubernetes_client import make_client
from schemas.actions import Action, ActionKind, Mode
from streams.settings import REPO_ROOT

KUBE_SH = REPO_ROOT / "deploy" / "local" / "kube.sh"
# The first kube-apiserver build compiles Kubernetes from source: allow it (the cached start is seconds).
pytestmark = pytest.mark.integration


def _running() -> bool:
    return subprocess.run(["bash", str(KUBE_SH), "status"], capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[Path]:
    env = os.environ.get("SICKBAY_KUBECONFIG")
    if env:
        if not Path(env).is_file():
            pytest.fail(f"SICKBAY_KUBECONFIG={env} is not a file")
        yield Path(env)
        return
    was_running = _running()
    up = subprocess.run(
        ["bash", str(KUBE_SH), "up"], capture_output=True, text=True, timeout=5400, check=False
    )
    if up.returncode != 0:
        pytest.fail(
            "no Kubernetes API server for these tests: SICKBAY_KUBECONFIG is unset and deploy/local/kube.sh up "
            "failed (it needs Go >= 1.26 at /usr/local/go or on PATH, the Go module proxy for the first build, "
            f"apt for etcd-server, and openssl):\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        )
    line = next((x for x in up.stdout.splitlines() if x.startswith("export SICKBAY_KUBECONFIG=")), "")
    path = Path(line.split("=", 1)[1].strip("'\"")) if line else REPO_ROOT / ".cache" / "kube" / "kubeconfig"
    if not path.is_file():
        pytest.fail(f"kube.sh up succeeded but wrote no kubeconfig at {path}:\n{up.stdout}")
    yield path
    if not was_running:
        subprocess.run(["bash", str(KUBE_SH), "down"], capture_output=True, timeout=120, check=False)


@pytest.fixture(scope="session")
def kube(kubeconfig: Path) -> Iterator[Client]:
    client = make_client(str(kubeconfig))
    try:
        list(client.list(Namespace))
    except Exception as exc:  # the fixture's whole point is a clear message here
        pytest.fail(f"the API server in {kubeconfig} does not answer: {exc}")
    yield client
    client.close()


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture
def namespace(kube: Client, uid: str) -> Iterator[str]:
    name = f"sb-{uid}"
    kube.create(Namespace.from_dict({"metadata": {"name": name}}))
    yield name
    kube.delete(Namespace, name)  # no namespace controller here: objects stay in etcd, names are unique


@pytest.fixture
def make_node(kube: Client) -> Iterator[Callable[..., str]]:
    made: list[str] = []

    def make(name: str, **spec: Any) -> str:
        kube.create(
            Node.from_dict(
                {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": spec}
            )
        )
        made.append(name)
        return name

    yield make
    for name in made:
        kube.delete(Node, name)


def pod(name: str, ns: str, node: str | None, labels: dict[str, str], **status: Any) -> Pod:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "trainer", "image": "example.invalid/trainer:1"}]},
    }
    if node:
        body["spec"]["nodeName"] = node
    if status:
        body["status"] = status
    return Pod.from_dict(body)


def k8s_action(kind: ActionKind, *, dry_run: bool = False, **fields: Any) -> Action:
    key = uuid.uuid4().hex[:12]
    return Action(
        action_id=f"act-{key}",
        idempotency_key=f"idem-{key}",
        kind=kind,
        mode=Mode.OBSERVE if dry_run else Mode.ACT,
        dry_run=dry_run,
        scheduler="kubernetes",
        cluster="it",
        incident_id=f"inc-{key}",
        incident_revision=1,
        reason=fields.pop("reason", "xid 79: GPU fell off the bus"),
        created_at=datetime.now(UTC),
        **fields,
    )
