"""The Kubernetes adapter: quarantine nodes and restart training workloads away from them.

Same contract as the Slurm adapter: observe before acting (a wanted state that already holds is
``converged``), ``dry_run`` validates against the live API and changes nothing, unknown nodes or
workloads are ``rejected`` with a clear detail, names are checked before any call, and transient API
errors are retried with backoff and surfaced in the result (every call is a :class:`CommandRun`).
Every object the adapter changes gets a core/v1 Event (reason, message, involvedObject).

- **drain_node** = cordon (``spec.unschedulable``) + taint ``sickbay.io/quarantine=<reason>:NoSchedule``
  + label ``sickbay.io/quarantined=true`` + annotations (reason, incident, action, expiry).
  **resume_node** undoes exactly that, and refuses to uncordon a node someone else cordoned.
- **requeue_job, PyTorchJob** (kubeflow.org/v1): a required node affinity
  ``kubernetes.io/hostname NotIn [excluded]`` is added to *every* node-selector term of every replica's
  pod template, then the job's pods are deleted. The training operator reconciles replicas by index and
  recreates any missing pod from the *current* template, so deletion is what restarts the job with the
  new placement; editing the template alone never touches running pods, and ``runPolicy.suspend`` would
  need a second call after the operator has acted (a race an adapter cannot see the end of).
- **requeue_job, TrainJob** (trainer.kubeflow.org/v1alpha1): ``spec.suspend`` is the documented restart
  (the TrainJob controller suspends its JobSet, whose Jobs delete their pods; resume recreates them).
  v1alpha1 ``podSpecOverrides`` carry nodeSelector and tolerations but no affinity, so "not on node X"
  cannot be written there: exclusion relies on the node quarantine taint (TrainJob pods do not tolerate
  it). The adapter therefore requires every excluded node to be quarantined first and rejects otherwise.
- **requeue_job, Kueue Workload** (kueue.x-k8s.io/v1beta1): ``spec.active=false`` is Kueue's documented
  deactivation (it evicts the workload and releases its quota); once evicted, ``spec.active=true``
  queues it again. Placement is the scheduler's (the quarantine taint keeps it off culprit nodes).

The suspend/deactivate steps wait up to ``settle_s`` for the controller's answer before undoing the
pause; if the controller did not answer, the result is ``pending`` (the reconciler looks again).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any, cast

from lightkube import Client
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from connectors.actuators.kubernetes_client import (
    WORKLOAD_API,
    WORKLOAD_RESOURCES,
    BadName,
    CallLog,
    KubeCallFailed,
    as_dict,
    check_label,
    check_subdomain,
    label_value,
)
from schemas.actions import Action, ActionKind, ActionResult, ActionStatus, Mode, WorkloadKind
from schemas.base import utcnow

log = logging.getLogger("sickbay.adapter.kubernetes")
ADAPTER = "kubernetes"
Outcome = tuple[ActionStatus, str]

TAINT_KEY = "sickbay.io/quarantine"
LABEL_KEY = "sickbay.io/quarantined"
ANN_REASON = "sickbay.io/quarantine-reason"
ANN_INCIDENT = "sickbay.io/incident-id"
ANN_ACTION = "sickbay.io/action-id"
ANN_EXPIRES = "sickbay.io/expires-at"
ANN_REQUEUE = "sickbay.io/last-requeue"  # the idempotency key of the last restart sickbay made
ANN_EXCLUDE = "sickbay.io/excluded-nodes"
HOSTNAME_KEY = "kubernetes.io/hostname"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
NODE_ANNOTATIONS = (ANN_REASON, ANN_INCIDENT, ANN_ACTION, ANN_EXPIRES)


class _Finished(Exception):
    """An outcome reached early (bad name, unknown object, converged)."""

    def __init__(self, status: ActionStatus, detail: str) -> None:
        super().__init__(detail)
        self.outcome: Outcome = (status, detail)


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _with_exclusion(affinity: dict[str, Any] | None, exclude: list[str]) -> dict[str, Any]:
    """``affinity`` with ``hostname NotIn exclude`` ANDed into every required node-selector term.

    Terms are ORed by the scheduler, so the expression must be in each of them; an existing
    ``hostname NotIn`` expression is widened rather than duplicated.
    """
    aff = dict(affinity or {})
    node_aff = dict(aff.get("nodeAffinity") or {})
    required = dict(node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [dict(t) for t in (required.get("nodeSelectorTerms") or [])] or [{}]
    for term in terms:
        exprs = [dict(e) for e in (term.get("matchExpressions") or [])]
        mine = [e for e in exprs if e.get("key") == HOSTNAME_KEY and e.get("operator") == "NotIn"]
        if mine:
            mine[0]["values"] = sorted(set(mine[0].get("values") or []) | set(exclude))
        else:
            exprs.append({"key": HOSTNAME_KEY, "operator": "NotIn", "values": sorted(exclude)})
        term["matchExpressions"] = exprs
    required["nodeSelectorTerms"] = terms
    node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = required
    aff["nodeAffinity"] = node_aff
    return aff


def excludes(affinity: dict[str, Any] | None, exclude: list[str]) -> bool:
    """True when every required term already keeps the pod off all of ``exclude``."""
    terms = (
        ((affinity or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms") or []
    if not terms:
        return not exclude
    for term in terms:
        banned: set[str] = set()
        for e in term.get("matchExpressions") or []:
            if e.get("key") == HOSTNAME_KEY and e.get("operator") == "NotIn":
                banned |= set(e.get("values") or [])
        if not set(exclude) <= banned:
            return False
    return True


def _condition(obj: dict[str, Any], kind: str) -> bool:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return bool(c.get("status") == "True")
    return False


class KubernetesAdapter:
    def __init__(
        self,
        client: Client,
        *,
        settle_s: float = 30.0,
        poll_s: float = 0.5,
        event_namespace: str = "default",
        attempts: int = 4,
        backoff_s: float = 0.2,
    ) -> None:
        self.client = client
        self.settle_s = settle_s
        self.poll_s = poll_s
        self.event_namespace = event_namespace
        self.attempts = attempts
        self.backoff_s = backoff_s

    def handle(self, action: Action) -> ActionResult:
        started = utcnow()
        calls = CallLog([], attempts=self.attempts, backoff_s=self.backoff_s)
        try:
            if action.kind == ActionKind.DRAIN_NODE:
                status, detail = self._drain(action, calls)
            elif action.kind == ActionKind.RESUME_NODE:
                status, detail = self._resume(action, calls)
            elif action.kind == ActionKind.REQUEUE_JOB:
                status, detail = self._requeue(action, calls)
            else:
                status, detail = ActionStatus.REJECTED, f"{action.kind.value} is not supported on Kubernetes"
        except _Finished as done:
            status, detail = done.outcome
        except BadName as exc:
            status, detail = ActionStatus.REJECTED, str(exc)
        except KubeCallFailed as exc:
            status, detail = ActionStatus.FAILED, str(exc)
        return ActionResult(
            action_id=action.action_id,
            idempotency_key=action.idempotency_key,
            kind=action.kind,
            status=status,
            adapter=ADAPTER,
            cluster=action.cluster,
            incident_id=action.incident_id,
            started_at=started,
            finished_at=utcnow(),
            commands=calls.runs,
            detail=detail,
        )

    def sweep_expired(
        self, cluster: str, *, now: datetime | None = None, dry_run: bool = False
    ) -> list[ActionResult]:
        """Restore nodes whose sickbay quarantine has expired; others' cordons and open-ended ones stay."""
        now = now or utcnow()
        listing = CallLog([], attempts=self.attempts, backoff_s=self.backoff_s)
        nodes = listing.call(
            "LIST",
            f"/api/v1/nodes?labelSelector={LABEL_KEY}=true",
            lambda: [as_dict(n) for n in self.client.list(Node, labels={LABEL_KEY: "true"})],
        )
        results: list[ActionResult] = []
        for node in nodes:
            meta = node.get("metadata") or {}
            raw = (meta.get("annotations") or {}).get(ANN_EXPIRES)
            try:
                expires = datetime.fromisoformat(raw.replace("Z", "+00:00")) if raw else None
            except ValueError:
                expires = None  # unreadable expiry: leave it to a human
            if expires is None or expires > now:
                continue
            key = (
                "sweep:"
                + hashlib.blake2b(f"{cluster}|{meta.get('name')}|{raw}".encode(), digest_size=8).hexdigest()
            )
            action = Action(
                action_id=key,
                idempotency_key=key,
                kind=ActionKind.RESUME_NODE,
                mode=Mode.OBSERVE if dry_run else Mode.ACT,
                dry_run=dry_run,
                scheduler="kubernetes",
                cluster=cluster,
                incident_id=(meta.get("annotations") or {}).get(ANN_INCIDENT) or "sweep",
                incident_revision=1,
                node=meta.get("name"),
                reason="sickbay quarantine expired",
                created_at=now,
            )
            results.append(self.handle(action))
        return results

    # -- helpers -----------------------------------------------------------------------------------

    def _get(self, calls: CallLog, what: str, path: str, fn: Callable[[], Any]) -> dict[str, Any]:
        """Read one object; a 404 ends the action as ``rejected`` (unknown node or job)."""
        try:
            return as_dict(calls.call("GET", path, fn))
        except KubeCallFailed as exc:
            if exc.code == 404:
                raise _Finished(ActionStatus.REJECTED, f"{what} not found") from exc
            raise

    def _event(
        self, calls: CallLog, obj: dict[str, Any], kind: str, api_version: str, reason: str, message: str
    ) -> str | None:
        """Write a core/v1 Event about ``obj``; returns an error text instead of failing the action."""
        meta = obj.get("metadata") or {}
        name, ns = meta.get("name", "?"), meta.get("namespace")
        now = _iso(utcnow())
        digest = hashlib.blake2b(f"{kind}|{name}|{reason}|{time.time_ns()}".encode(), digest_size=6)
        event_ns = ns or self.event_namespace
        body = {
            "metadata": {"name": f"{name}.sickbay-{digest.hexdigest()}", "namespace": event_ns},
            "involvedObject": {
                "apiVersion": api_version,
                "kind": kind,
                "name": name,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
                **({"namespace": ns} if ns else {}),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": "sickbay"},
            "reportingComponent": "sickbay",
            "reportingInstance": "sickbay-adapter",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        event = cast(Event, Event.from_dict(body))
        try:
            calls.call("POST", f"/api/v1/namespaces/{event_ns}/events", lambda: self.client.create(event))
        except KubeCallFailed as exc:
            return f"event not written: {exc}"
        return None

    @staticmethod
    def _with_event_note(detail: str, errors: list[str | None]) -> str:
        notes = [e for e in errors if e]
        return detail + ("; " + "; ".join(notes) if notes else "")

    # -- nodes -------------------------------------------------------------------------------------

    def _patch_node(self, calls: CallLog, name: str, patch: dict[str, Any]) -> None:
        calls.call(
            "PATCH",
            f"/api/v1/nodes/{name}",
            lambda: self.client.patch(Node, name, patch, patch_type=PatchType.MERGE),
        )

    def _node(self, action: Action, calls: CallLog) -> tuple[str, dict[str, Any]]:
        name = check_subdomain("node", action.node)
        node = self._get(calls, f"node {name}", f"/api/v1/nodes/{name}", lambda: self.client.get(Node, name))
        return name, node

    def _drain(self, action: Action, calls: CallLog) -> Outcome:
        for _ in range(3):  # read-modify-write; a 409 means the node changed under us: read again
            name, node = self._node(action, calls)
            meta, spec = node.get("metadata") or {}, node.get("spec") or {}
            taints = list(spec.get("taints") or [])
            has_taint = any(t.get("key") == TAINT_KEY for t in taints)
            if (
                spec.get("unschedulable")
                and has_taint
                and (meta.get("labels") or {}).get(LABEL_KEY) == "true"
            ):
                return ActionStatus.CONVERGED, f"node {name} already quarantined by sickbay"
            slug = label_value(action.reason)
            taint = {"key": TAINT_KEY, "value": slug, "effect": "NoSchedule", "timeAdded": _iso(utcnow())}
            annotations = {
                ANN_REASON: action.reason,
                ANN_INCIDENT: action.incident_id,
                ANN_ACTION: action.action_id,
                ANN_EXPIRES: _iso(action.expires_at) if action.expires_at else None,
            }
            patch = {
                "metadata": {
                    "resourceVersion": meta.get("resourceVersion"),
                    "labels": {LABEL_KEY: "true"},
                    "annotations": annotations,
                },
                "spec": {
                    "unschedulable": True,
                    "taints": [t for t in taints if t.get("key") != TAINT_KEY] + [taint],
                },
            }
            plan = f"cordon {name}, taint {TAINT_KEY}={slug}:NoSchedule, label {LABEL_KEY}=true"
            if action.dry_run:
                return ActionStatus.DRY_RUN, "would " + plan
            try:
                self._patch_node(calls, name, patch)
            except KubeCallFailed as exc:
                if exc.code == 409:
                    continue
                raise
            note = self._event(
                calls,
                node,
                "Node",
                "v1",
                "SickbayQuarantine",
                f"{plan}: {action.reason} (incident {action.incident_id})",
            )
            return ActionStatus.SUCCEEDED, self._with_event_note(f"node {name} quarantined ({plan})", [note])
        return ActionStatus.FAILED, f"node {action.node} kept changing (3 conflicts); not quarantined"

    def _resume(self, action: Action, calls: CallLog) -> Outcome:
        for _ in range(3):
            name, node = self._node(action, calls)
            meta, spec = node.get("metadata") or {}, node.get("spec") or {}
            taints = list(spec.get("taints") or [])
            ours = (meta.get("labels") or {}).get(LABEL_KEY) == "true" or any(
                t.get("key") == TAINT_KEY for t in taints
            )
            if not ours:
                if spec.get("unschedulable"):
                    return ActionStatus.REJECTED, f"node {name} was cordoned by someone else; not uncordoning"
                return ActionStatus.CONVERGED, f"node {name} is not quarantined"
            patch = {
                "metadata": {
                    "resourceVersion": meta.get("resourceVersion"),
                    "labels": {LABEL_KEY: None},
                    "annotations": dict.fromkeys(NODE_ANNOTATIONS),
                },
                "spec": {
                    "unschedulable": None,
                    "taints": [t for t in taints if t.get("key") != TAINT_KEY] or None,
                },
            }
            if action.dry_run:
                return (
                    ActionStatus.DRY_RUN,
                    f"would uncordon {name} and remove sickbay's taint, label, annotations",
                )
            try:
                self._patch_node(calls, name, patch)
            except KubeCallFailed as exc:
                if exc.code == 409:
                    continue
                raise
            note = self._event(
                calls, node, "Node", "v1", "SickbayRestore", f"uncordoned {name}: {action.reason}"
            )
            return ActionStatus.SUCCEEDED, self._with_event_note(f"node {name} restored", [note])
        return ActionStatus.FAILED, f"node {action.node} kept changing (3 conflicts); not restored"

    # -- workloads ---------------------------------------------------------------------------------

    def _requeue(self, action: Action, calls: CallLog) -> Outcome:
        kind = action.workload_kind
        if kind is None or kind not in WORKLOAD_RESOURCES:
            return ActionStatus.REJECTED, (
                f"requeue_job on Kubernetes needs workload_kind in "
                f"{sorted(k.value for k in WORKLOAD_RESOURCES)}, got {kind}"
            )
        ns = check_label("namespace", action.namespace)
        name = check_subdomain(kind.value, action.job_id)
        exclude = sorted({check_subdomain("node", n) for n in action.exclude_nodes})
        res = WORKLOAD_RESOURCES[kind]
        group, version, plural = WORKLOAD_API[kind]
        path = f"/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}"
        obj = self._get(
            calls, f"{kind.value} {ns}/{name}", path, lambda: self.client.get(res, name, namespace=ns)
        )
        if (obj["metadata"].get("annotations") or {}).get(ANN_REQUEUE) == action.idempotency_key:
            return ActionStatus.CONVERGED, f"{kind.value} {ns}/{name} already restarted for this action"
        if kind == WorkloadKind.PYTORCH_JOB:
            return self._requeue_pytorchjob(action, calls, res, path, obj, exclude)
        if kind == WorkloadKind.TRAIN_JOB:
            return self._requeue_trainjob(action, calls, res, path, obj, exclude)
        return self._requeue_workload(action, calls, res, path, obj)

    def _job_pods(self, calls: CallLog, ns: str, selector: str, value: str) -> list[dict[str, Any]]:
        pods = calls.call(
            "LIST",
            f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}={value}",
            lambda: list(self.client.list(Pod, namespace=ns, labels={selector: value})),
        )
        return [as_dict(p) for p in pods]

    def _delete_pods(self, calls: CallLog, pods: list[dict[str, Any]], reason: str) -> list[str | None]:
        notes: list[str | None] = []
        for pod in pods:
            meta = pod["metadata"]
            pname, pns = meta["name"], meta["namespace"]
            try:
                calls.call(
                    "DELETE",
                    f"/api/v1/namespaces/{pns}/pods/{pname}",
                    partial(self._delete_pod, pname, pns),
                )
            except KubeCallFailed as exc:
                if exc.code != 404:  # already gone is what we wanted
                    raise
            notes.append(self._event(calls, pod, "Pod", "v1", "SickbayRestart", reason))
        return notes

    def _delete_pod(self, name: str, ns: str) -> None:
        self.client.delete(Pod, name, namespace=ns)

    def _mark(self, action: Action, exclude: list[str], rv: str | None) -> dict[str, Any]:
        return {
            "resourceVersion": rv,
            "annotations": {
                ANN_REQUEUE: action.idempotency_key,
                ANN_INCIDENT: action.incident_id,
                ANN_EXCLUDE: ",".join(exclude) or None,
            },
        }

    def _requeue_pytorchjob(
        self, action: Action, calls: CallLog, res: Any, path: str, obj: dict[str, Any], exclude: list[str]
    ) -> Outcome:
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        replicas: dict[str, Any] = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
        if not replicas:
            return ActionStatus.REJECTED, f"pytorchjob {ns}/{name} has no pytorchReplicaSpecs"
        pods = [
            p
            for p in self._job_pods(calls, ns, JOB_NAME_LABEL, name)
            if not p["metadata"].get("deletionTimestamp")
        ]
        on_excluded = [
            p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName") in exclude
        ]
        placed = all(
            excludes(((r.get("template") or {}).get("spec") or {}).get("affinity"), exclude)
            for r in replicas.values()
        )
        if exclude and placed and not on_excluded:
            return (
                ActionStatus.CONVERGED,
                f"pytorchjob {ns}/{name} already excludes {exclude} and has no pod there",
            )
        plan = f"add {HOSTNAME_KEY} NotIn {exclude} to {sorted(replicas)} templates, delete {len(pods)} pods"
        if action.dry_run:
            return ActionStatus.DRY_RUN, f"would {plan} of pytorchjob {ns}/{name}"
        patch_specs = (
            {
                rname: {
                    "template": {
                        "spec": {
                            "affinity": _with_exclusion(
                                ((r.get("template") or {}).get("spec") or {}).get("affinity"), exclude
                            )
                        }
                    }
                }
                for rname, r in replicas.items()
            }
            if exclude
            else {}
        )
        patch = {
            "metadata": self._mark(action, exclude, meta.get("resourceVersion")),
            "spec": {"pytorchReplicaSpecs": patch_specs},
        }
        try:
            calls.call(
                "PATCH",
                path,
                lambda: self.client.patch(res, name, patch, namespace=ns, patch_type=PatchType.MERGE),
            )
        except KubeCallFailed as exc:
            if exc.code == 409:
                return (
                    ActionStatus.FAILED,
                    f"pytorchjob {ns}/{name} changed while restarting; retry the action",
                )
            raise
        why = f"restart away from {exclude or 'no node'}: {action.reason} (incident {action.incident_id})"
        notes = self._delete_pods(calls, pods, why)
        notes.append(
            self._event(calls, obj, "PyTorchJob", "kubeflow.org/v1", "SickbayRestart", f"{plan}; {why}")
        )
        return ActionStatus.SUCCEEDED, self._with_event_note(f"pytorchjob {ns}/{name}: {plan}", notes)

    def _quarantined(self, calls: CallLog, node: str) -> bool:
        n = self._get(
            calls, f"excluded node {node}", f"/api/v1/nodes/{node}", lambda: self.client.get(Node, node)
        )
        spec = n.get("spec") or {}
        return any(
            t.get("key") == TAINT_KEY and t.get("effect") in ("NoSchedule", "NoExecute")
            for t in spec.get("taints") or []
        )

    def _wait(self, check: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + self.settle_s
        while True:
            if check():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_s)

    def _requeue_trainjob(
        self, action: Action, calls: CallLog, res: Any, path: str, obj: dict[str, Any], exclude: list[str]
    ) -> Outcome:
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        unguarded = [n for n in exclude if not self._quarantined(calls, n)]
        if unguarded:
            return ActionStatus.REJECTED, (
                f"trainjob {ns}/{name}: v1alpha1 podSpecOverrides cannot express node anti-affinity, "
                f"so exclusion relies on the {TAINT_KEY} taint, which {unguarded} do not carry; "
                "drain them first"
            )
        if (obj.get("spec") or {}).get("suspend"):
            return (
                ActionStatus.REJECTED,
                f"trainjob {ns}/{name} is suspended by someone else; not resuming it",
            )
        if action.dry_run:
            return (
                ActionStatus.DRY_RUN,
                f"would suspend and resume trainjob {ns}/{name} (excluded by taint: {exclude})",
            )
        suspend = {
            "metadata": self._mark(action, exclude, meta.get("resourceVersion")),
            "spec": {"suspend": True},
        }
        calls.call(
            "PATCH",
            path,
            lambda: self.client.patch(res, name, suspend, namespace=ns, patch_type=PatchType.MERGE),
        )
        stopped = self._wait(lambda: not self._job_pods(calls, ns, JOBSET_NAME_LABEL, name))
        calls.call(
            "PATCH",
            path,
            lambda: self.client.patch(
                res, name, {"spec": {"suspend": False}}, namespace=ns, patch_type=PatchType.MERGE
            ),
        )
        why = (
            f"suspend+resume to restart away from {exclude or 'no node'}: {action.reason} "
            f"(incident {action.incident_id})"
        )
        note = self._event(calls, obj, "TrainJob", "trainer.kubeflow.org/v1alpha1", "SickbayRestart", why)
        if not stopped:
            return ActionStatus.PENDING, self._with_event_note(
                f"trainjob {ns}/{name} suspended and resumed, but its pods were still there "
                f"after {self.settle_s}s",
                [note],
            )
        return ActionStatus.SUCCEEDED, self._with_event_note(
            f"trainjob {ns}/{name} restarted (suspend, resume)", [note]
        )

    def _requeue_workload(
        self, action: Action, calls: CallLog, res: Any, path: str, obj: dict[str, Any]
    ) -> Outcome:
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        admitted = _condition(obj, "QuotaReserved") or _condition(obj, "Admitted")
        active = (obj.get("spec") or {}).get("active", True) is not False
        if not admitted and active:
            return ActionStatus.CONVERGED, f"workload {ns}/{name} holds no quota: already queued"
        if action.dry_run:
            return (
                ActionStatus.DRY_RUN,
                f"would deactivate workload {ns}/{name}, wait for eviction, reactivate",
            )
        off = {"metadata": self._mark(action, [], meta.get("resourceVersion")), "spec": {"active": False}}
        calls.call(
            "PATCH", path, lambda: self.client.patch(res, name, off, namespace=ns, patch_type=PatchType.MERGE)
        )

        def evicted() -> bool:
            now = as_dict(calls.call("GET", path, lambda: self.client.get(res, name, namespace=ns)))
            return _condition(now, "Evicted") or not (
                _condition(now, "QuotaReserved") or _condition(now, "Admitted")
            )

        done = self._wait(evicted)
        calls.call(
            "PATCH",
            path,
            lambda: self.client.patch(
                res, name, {"spec": {"active": True}}, namespace=ns, patch_type=PatchType.MERGE
            ),
        )
        why = f"deactivate+reactivate to requeue: {action.reason} (incident {action.incident_id})"
        note = self._event(calls, obj, "Workload", "kueue.x-k8s.io/v1beta1", "SickbayRequeue", why)
        if not done:
            return ActionStatus.PENDING, self._with_event_note(
                f"workload {ns}/{name} deactivated and reactivated, but Kueue did not evict it "
                f"within {self.settle_s}s",
                [note],
            )
        return ActionStatus.SUCCEEDED, self._with_event_note(
            f"workload {ns}/{name} evicted and requeued", [note]
        )
