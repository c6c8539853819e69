"""Has restarting helped? A failure that already ended an earlier attempt of the same job, with no
checkpoint saved since, is not fixed by restarting again.

A root such as an illegal memory access reads as restartable on its own: it may be a one-off. When
the job was restarted and the same failure ended the next attempt before any new checkpoint, the run is
in a loop: every attempt reloads the same state and dies the same way, and the GPUs burn while it
does. The incident then says ``restartable: false`` and carries the earlier attempt's root as
evidence. The decide step stops such a job on its own restart budget too; this puts the same
history into the verdict that operators and the analytics read.

Hardware roots are left alone: a bad node on each attempt is fixed by excluding it, not by giving
up. So are infrastructure roots: a job preempted twice or cut by a time limit twice is not broken.

The stream keeps the history in the job's topology entry (``JobTopology.failures`` and
``last_checkpoint_at``, carried from attempt to attempt); ``sickbay diagnose`` rebuilds the same
history from the attempts found in one folder of logs.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from schemas.incidents import Category, Evidence, Incident
from streams.correlate.attribution import Verdict
from streams.correlate.state import JobTopology, PastFailure

# a failure of the job itself: the same one again means the restart changed nothing
JUDGED = frozenset({Category.APPLICATION, Category.SYSTEM_SOFTWARE, Category.UNKNOWN})
MAX_FAILURES = 8  # the roots of the newest attempts; a loop shows within two


def failure_of(rule: str, summary: str, node: str | None, gpu: str | None) -> str:
    """What failed, without where: the rule and its summary with the root's node and GPU taken out.
    The summary tells a generic rule's errors apart (``cuda.error`` covers every CUDA message, one
    ``gpu.xid`` rule every code); the place must go, since each attempt runs on other nodes."""
    for where in (gpu, node):
        if where:
            summary = summary.replace(where, "*")
    return f"{rule}|{summary}"


def repeated(verdict: Verdict, others: list[PastFailure], last_save: datetime | None) -> Verdict:
    """``verdict`` made non-restartable when ``others`` (the roots that ended the job's other
    attempts) holds the same failure (``failure_of``) and no checkpoint was saved after the first
    of them."""
    if not verdict.restartable or verdict.provisional or verdict.category not in JUDGED:
        return verdict
    root = verdict.root
    failure = failure_of(root.rule, root.summary, root.node, root.gpu)
    same = [f.root for f in others if f.failure == failure and f.root.signal_id != root.signal_id]
    if not same:
        return verdict
    first = min(root.event_time, *(e.event_time for e in same))
    if last_save is not None and last_save > first:
        return verdict  # the restarts made progress
    return dataclasses.replace(verdict, restartable=False, evidence=[*same, *verdict.evidence])


def with_history(verdict: Verdict | None, attempt: int, topo: JobTopology | None) -> Verdict | None:
    """The stream's reading: the roots of the job's attempts before ``attempt``."""
    if verdict is None or topo is None or not topo.failures:
        return verdict
    earlier = [f for f in topo.failures if f.attempt < attempt]
    return repeated(verdict, earlier, topo.last_checkpoint_at) if earlier else verdict


def remember_failure(topo: JobTopology, incident: Incident) -> JobTopology:
    """The topology with ``incident``'s root among its attempt's failures; the same object when that
    failure is already known. Every root a revision named is kept, not just the last: the kernel's
    Xid and the job's CUDA error of one crash may each be the root of some revision, and the next
    attempt's incident may settle on the other one."""
    rc = incident.root_cause
    what = failure_of(rc.rule, rc.summary, rc.node, rc.gpu)
    if any(f.attempt == incident.attempt and f.failure == what for f in topo.failures):
        return topo
    kind = next((e.source_kind for e in incident.evidence if e.signal_id == rc.signal_id), "other")
    root = Evidence(
        signal_id=rc.signal_id,
        rule=rc.rule,
        node=rc.node,
        rank=rc.rank,
        event_time=rc.event_time,
        text=rc.text,
        source_kind=kind,
    )
    failure = PastFailure(attempt=incident.attempt, failure=what, root=root)
    failures = sorted([*topo.failures, failure], key=lambda f: f.attempt)
    return topo.model_copy(update={"failures": failures[-MAX_FAILURES:]})


def saw_checkpoint(topo: JobTopology, at: datetime) -> JobTopology:
    """The topology with a checkpoint saved at ``at``; the same object when it is not newer."""
    if topo.last_checkpoint_at is not None and at <= topo.last_checkpoint_at:
        return topo
    return topo.model_copy(update={"last_checkpoint_at": at})
