"""The Kubernetes side shared by the adapter and the watch collector: credentials, names, retries, resources.

- Credentials come from ``SICKBAY_KUBECONFIG``, then ``KUBECONFIG``, then the in-cluster service account,
  then ``~/.kube/config`` — never from arguments that end up in logs, and nothing here logs them.
- Names are checked against the API's grammar *before* any call, so a hostile or garbled name in an
  action is a clear rejection, not a request with an odd path.
- Transient API failures (connection errors, 429, 5xx, optimistic-concurrency 409) are retried with
  exponential backoff; the last error is raised as :class:`KubeCallFailed` so the caller reports it.
- The custom resources (PyTorchJob, TrainJob, Kueue Workload) are generic lightkube resources: no CRD model
  package is needed and unknown fields round-trip untouched.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource

from schemas.actions import CommandRun, WorkloadKind

WORKLOAD_API: dict[WorkloadKind, tuple[str, str, str]] = {  # group, version, plural
    WorkloadKind.PYTORCH_JOB: ("kubeflow.org", "v1", "pytorchjobs"),
    WorkloadKind.TRAIN_JOB: ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    WorkloadKind.KUEUE_WORKLOAD: ("kueue.x-k8s.io", "v1beta1", "workloads"),
}
PyTorchJob = create_namespaced_resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
TrainJob = create_namespaced_resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")
KueueWorkload = create_namespaced_resource("kueue.x-k8s.io", "v1beta1", "Workload", "workloads")

WORKLOAD_RESOURCES: dict[WorkloadKind, Any] = {
    WorkloadKind.PYTORCH_JOB: PyTorchJob,
    WorkloadKind.TRAIN_JOB: TrainJob,
    WorkloadKind.KUEUE_WORKLOAD: KueueWorkload,
}

# RFC 1123: a DNS subdomain (node names, most object names) and a DNS label (namespaces).
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# 409 is not here: a conflict needs a fresh read, which the caller does (read-modify-write loop).
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})

T = TypeVar("T")


class BadName(ValueError):
    """A name that the Kubernetes API would refuse; raised before any request is made."""


def check_subdomain(kind: str, name: str | None) -> str:
    if not name or len(name) > 253 or not _SUBDOMAIN.match(name):
        raise BadName(f"{kind} name {name!r} is not a valid RFC 1123 subdomain")
    return name


def check_label(kind: str, name: str | None) -> str:
    if not name or len(name) > 63 or not _LABEL.match(name):
        raise BadName(f"{kind} {name!r} is not a valid RFC 1123 label")
    return name


def label_value(text: str, default: str = "unspecified") -> str:
    """A free-text reason folded into a valid label/taint value (<= 63 chars, alnum at both ends)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")[:63].strip("-_.")
    return slug or default


def load_config(path: str | None = None) -> KubeConfig:
    """Kubeconfig from ``path``, ``SICKBAY_KUBECONFIG``, ``KUBECONFIG``, in-cluster, or ``~/.kube/config``."""
    for candidate in (path, os.environ.get("SICKBAY_KUBECONFIG"), os.environ.get("KUBECONFIG")):
        if candidate:
            first = candidate.split(os.pathsep)[0]
            if not Path(first).is_file():
                raise FileNotFoundError(f"kubeconfig {first} does not exist")
            return KubeConfig.from_file(first)
    return KubeConfig.from_env()


def make_client(path: str | None = None, timeout_s: float = 10.0) -> Client:
    return Client(config=load_config(path), timeout=httpx2.Timeout(timeout_s), field_manager="sickbay")


class KubeCallFailed(RuntimeError):
    """An API call that still failed after the retries; ``code`` is the HTTP status (0: no answer)."""

    def __init__(self, what: str, code: int, message: str) -> None:
        super().__init__(f"{what}: {message} (HTTP {code})" if code else f"{what}: {message}")
        self.code = code
        self.message = message


def transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiError):
        return exc.status.code in _RETRY_STATUS
    return isinstance(exc, httpx2.TransportError)


@dataclass
class CallLog:
    """Every API call an action made, as :class:`CommandRun` records (argv = verb + path, never a body)."""

    runs: list[CommandRun]
    attempts: int = 4
    backoff_s: float = 0.2

    def call(self, verb: str, path: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` with retries on transient errors; record the outcome; raise :class:`KubeCallFailed`."""
        delay = self.backoff_s
        last: BaseException | None = None
        for attempt in range(1, self.attempts + 1):
            t0 = time.monotonic()
            try:
                out = fn()
            except (ApiError, httpx2.HTTPError) as exc:
                code = (exc.status.code or 0) if isinstance(exc, ApiError) else 0
                msg = (exc.status.message if isinstance(exc, ApiError) else str(exc)) or type(exc).__name__
                self.runs.append(
                    CommandRun(
                        argv=[verb, path],
                        returncode=code or -1,
                        stderr=f"attempt {attempt}: {msg}"[:2000],
                        duration_s=time.monotonic() - t0,
                    )
                )
                last = exc
                if not transient(exc) or attempt == self.attempts:
                    raise KubeCallFailed(f"{verb} {path}", code, msg) from exc
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self.runs.append(CommandRun(argv=[verb, path], returncode=0, duration_s=time.monotonic() - t0))
            return out
        raise KubeCallFailed(f"{verb} {path}", 0, str(last))  # pragma: no cover - loop always returns/raises


def as_dict(obj: Any) -> dict[str, Any]:
    """A lightkube model or generic resource as a plain dict."""
    if isinstance(obj, dict):
        return obj
    out = obj.to_dict()
    if not isinstance(out, dict):  # pragma: no cover - lightkube always returns a mapping
        raise TypeError(f"cannot read {type(obj).__name__}")
    return out
