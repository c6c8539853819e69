"""Kubernetes Events as log lines: what they are about, not where the exporter runs.

Clusters ship their Events to Kafka the way they ship logs: an event exporter
(kubernetes-event-exporter, the node-problem-detector's events, Grafana Alloy's
``loki.source.kubernetes_events``) prints each Event as one JSON line, which Fluent Bit or Vector
then carries as that exporter pod's container log -- or the exporter's own Kafka sink writes the
bare Event object. Either way the shipper's host is the exporter's node and the record names no
job: an ``OOMKilling`` Event about node A, or a ``Preempted`` Event about a Kueue Workload, would
otherwise be blamed on the node that runs the exporter.

The Event says what it is about (``regarding`` in events.k8s.io/v1, ``involvedObject`` in core
v1). A Node event is about that node. A training job, its pods and its Kueue Workload are about
that job, named by the conventions the operators use:

- Kubeflow training-operator v1 pods: ``<job>-<replica type>-<index>`` (master, worker, launcher, ...);
- Kubeflow Trainer v2 (TrainJob through JobSet): ``<job>-node-<job index>-<pod index>-<suffix>``;
- Kueue Workloads: ``<owner kind in lower case>-<job>-<5-character hash>``.

The pod's node is not in a pod Event, so such a line gets no host rather than the exporter's.
"""

from __future__ import annotations

import re
from typing import Any

from schemas import codec
from schemas.raw import LogLine
from streams.extract.timeparse import parse_rfc3339

EVENT_ADAPTER = "k8s-event"  # the adapter of a line composed from an Event (its JSON, re-encoded)
JOB_KINDS = frozenset(
    {
        "PyTorchJob", "TrainJob", "MPIJob", "TFJob", "JAXJob", "XGBoostJob", "PaddleJob",
        "JobSet", "RayJob", "Job",
    }
)  # fmt: skip
_KUBEFLOW_POD = re.compile(
    r"^(?P<job>[a-z0-9][a-z0-9.-]*?)-(?:master|worker|launcher|chief|ps|evaluator)-\d+$"
)
_TRAINJOB_POD = re.compile(r"^(?P<job>[a-z0-9][a-z0-9.-]*?)-node-\d+-\d+-[a-z0-9]{5}$")
_KUEUE_WORKLOAD = re.compile(
    r"^(?:pytorchjob|trainjob|mpijob|tfjob|jaxjob|xgboostjob|paddlejob|jobset|rayjob|job)-"
    r"(?P<job>[a-z0-9][a-z0-9.-]*)-[a-z0-9]{5}$"
)


def job_of(kind: str, name: str) -> str | None:
    """The training job an Event's object belongs to, by the operators' naming conventions."""
    if kind in JOB_KINDS:
        return name
    if kind == "Pod":
        m = _KUBEFLOW_POD.match(name) or _TRAINJOB_POD.match(name)
        return m.group("job") if m else None
    if kind == "Workload":
        m = _KUEUE_WORKLOAD.match(name)
        return m.group("job") if m else None
    return None


def is_event(obj: dict[str, Any]) -> bool:
    return obj.get("kind") == "Event" and isinstance(obj.get("regarding") or obj.get("involvedObject"), dict)


def _about(obj: dict[str, Any]) -> dict[str, Any]:
    target = obj.get("regarding") or obj.get("involvedObject")
    return target if isinstance(target, dict) else {}


def _when(obj: dict[str, Any]) -> Any:
    for key in ("eventTime", "lastTimestamp", "firstTimestamp"):
        value = obj.get(key)
        if isinstance(value, str) and (t := parse_rfc3339(value)) is not None:
            return t
    meta = obj.get("metadata")
    stamp = meta.get("creationTimestamp") if isinstance(meta, dict) else None
    return parse_rfc3339(stamp) if isinstance(stamp, str) else None


def subject_update(obj: dict[str, Any]) -> dict[str, Any]:
    """LogLine fields an Event decides: host (a Node's name, else none), job, namespace, time."""
    about = _about(obj)
    kind, name = str(about.get("kind") or ""), str(about.get("name") or "")
    update: dict[str, Any] = {"host": name if kind == "Node" and name else None}
    if (job := job_of(kind, name)) is not None:
        update["job_id"] = job
    if kind == "Pod":
        update["pod"] = name
    if isinstance(ns := about.get("namespace"), str):
        update["namespace"] = ns
    if (t := _when(obj)) is not None:
        update["event_time"] = t
    return update


def event_line(obj: dict[str, Any]) -> LogLine:
    """A bare Event object written to raw.logs (an exporter's own Kafka sink)."""
    return LogLine(text=codec.dumps(obj).decode(), adapter=EVENT_ADAPTER, **subject_update(obj))


def with_event_subject(line: LogLine) -> LogLine:
    """A shipped line whose text is an Event's JSON: about its subject, not the shipper's host."""
    text = line.text
    if not text.startswith("{") or text.find('"Event"', 0, 400) < 0:  # every line passes here: no slice
        return line
    try:
        obj = codec.loads(text)
    except codec.JSONDecodeError:
        return line
    if not isinstance(obj, dict) or not is_event(obj):
        return line
    update = subject_update(obj)
    if line.job_id is not None:
        # the producer resolved the subject itself (``sickbay collect kubernetes`` knows each pod's
        # node and job from its watch): what it said stands, the Event only fills what it left out
        update = {k: v for k, v in update.items() if v is not None and getattr(line, k) is None}
    return line.model_copy(update=update)
