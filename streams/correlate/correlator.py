"""The per-job correlator: topology updates, incident windows and when to emit a revision.

Pure: the Faust agent (and tests) pass in the state and the current time and
persist what comes back. Timing rules:

- a decisive root emits revision 1 at once (the *fast* incident);
- a non-decisive root candidate also emits at once, with lower confidence;
- a window holding only cascades waits ``root_grace_s`` for a root, then emits
  with category ``unknown``; with ``provisional_after_s`` set it publishes that verdict
  as *provisional* once the window is that old (the burst of ranks' timeouts is in, so
  the silent rank can be named) and again whenever it changes, and the revision at the
  end of the grace (or at the first root) is the final one the decide step acts on;
- a change of root, culprit, category or isolation emits a revision at once;
  other new evidence is coalesced and emitted on the next tick;
- a window closes (final revision, status ``closed``) after ``quiet_s`` without
  new signals, or ``root_grace_s`` after the job ended;
- a root that is itself an early warning (a GPU that just started throttling, see
  ``straggler``) emits at once as *provisional*, and stays provisional until a root that
  can be acted on arrives, up to and including the closing revision.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from schemas.incidents import Incident, IncidentStatus
from schemas.signals import JobNodeAssignment, Role, Signal
from streams.correlate.attribution import (
    PLUGIN_LOADED_RULE,
    PLUGIN_MISSING_RULE,
    PlaceOf,
    Verdict,
    attribute,
    is_lead,
    root_cause,
)
from streams.correlate.progress import JOB_STARTING_RULES
from streams.correlate.restarts import with_history
from streams.correlate.state import SAMPLES_PER_RULE, IncidentWindow, JobTopology, RuleTally, with_unsent

OPENING_ROLES = {Role.ROOT_CANDIDATE, Role.CASCADE}
K8S_POD_SCHEDULED = "kubernetes.pod_scheduled"  # a Scheduled Event: one pod of the job bound to a node
K8S_JOB_PODS = "kubernetes.job_pods"  # connectors/sources/kubernetes_watch.py: nodes of a job's live pods
MAX_SEEN_IDS = 2048
ENDED_ATTEMPT_EVIDENCE = timedelta(hours=1)  # after an attempt's end, what still counts as its evidence
MAX_ROOTS = 64


@dataclass(frozen=True)
class Timing:
    root_grace_s: float = 20.0
    quiet_s: float = 120.0
    refine_interval_s: float = 1.0
    provisional_after_s: float | None = None  # None: a cascade-only window says nothing until the grace ends


def incident_id(cluster: str, job_id: str, attempt: int, opening_signal_id: str) -> str:
    """Deterministic: replaying the same records yields the same incident id."""
    raw = f"{cluster}|{job_id}|{attempt}|{opening_signal_id}"
    return "inc-" + hashlib.blake2b(raw.encode(), digest_size=8).hexdigest()


def apply_topology(
    topo: JobTopology | None, signal: Signal, cluster: str
) -> tuple[JobTopology, list[JobNodeAssignment]]:
    """Update a job's topology from a scheduler signal; return node assignments to publish."""
    job_id = signal.job_id or "?"
    topo = topo or JobTopology(job_id=job_id, attempt=0)
    out: list[JobNodeAssignment] = []

    def release(t: JobTopology) -> None:
        out.extend(
            JobNodeAssignment(
                node=n,
                job_id=t.job_id,
                attempt=max(t.attempt, 1),
                state="released",
                event_time=signal.event_time,
                cluster=cluster,
            )
            for n in t.nodes
        )

    if signal.rule in JOB_STARTING_RULES:
        nodes = signal.attrs.get("nodes")
        node_list = [str(n) for n in nodes] if isinstance(nodes, list) else []
        if topo.started_at is not None and signal.event_time <= topo.started_at:
            return topo, out  # a replayed or duplicated allocation
        if topo.nodes and topo.ended_at is None:
            release(topo)
        topo = _next_attempt(topo, nodes=node_list, ordered=True, started_at=signal.event_time)
        out.extend(
            JobNodeAssignment(
                node=n,
                job_id=job_id,
                attempt=topo.attempt,
                state="assigned",
                event_time=signal.event_time,
                cluster=cluster,
            )
            for n in node_list
        )
    elif signal.rule == K8S_JOB_PODS:
        topo = _k8s_pods(topo, signal)
    elif signal.rule == K8S_POD_SCHEDULED and signal.node:
        topo = _k8s_scheduled(topo, signal)
        if signal.node in topo.nodes and topo.started_at is not None and topo.ended_at is None:
            out.append(
                JobNodeAssignment(
                    node=signal.node,
                    job_id=job_id,
                    attempt=max(topo.attempt, 1),
                    state="assigned",
                    event_time=signal.event_time,
                    cluster=cluster,
                )
            )
    elif signal.rule in ("slurm.job_complete", "slurm.job_requeued") and topo.ended_at is None:
        release(topo)
        end_state = (
            "requeued"
            if signal.rule == "slurm.job_requeued"
            else f"{signal.attrs.get('how')} {signal.attrs.get('status')}"
        )
        topo = topo.model_copy(update={"ended_at": signal.event_time, "end_state": end_state})
    return topo, out


def _next_attempt(
    topo: JobTopology, *, nodes: list[str], started_at: datetime, ordered: bool = False
) -> JobTopology:
    """A new attempt of the job: fresh placement, the history of earlier attempts kept (restarts.py)."""
    return JobTopology(
        job_id=topo.job_id,
        attempt=topo.attempt + 1,
        nodes=nodes,
        ordered=ordered,
        started_at=started_at,
        failures=topo.failures,
        last_checkpoint_at=topo.last_checkpoint_at,
    )


def _k8s_pods(topo: JobTopology, signal: Signal) -> JobTopology:
    """A Kubernetes job's live pod placement (``kubernetes.job_pods``, from ``collect kubernetes``).

    Kubernetes has no allocation line: pods appear and go one by one. The nodes of live pods are a
    snapshot; the first non-empty one after none (or after the last attempt ended) starts a new attempt,
    later ones add nodes to it, and an empty one (every pod gone: deleted for a restart, or finished)
    ends it, as ``slurm.job_requeued`` does. The watch publishes its own per-pod node assignments, so
    none are returned here. Snapshots older than the attempt's start or end are replays and ignored.
    """
    raw = signal.attrs.get("nodes")
    nodes = sorted({str(n) for n in raw}) if isinstance(raw, list) else []
    if (topo.started_at is not None and signal.event_time < topo.started_at) or (
        topo.ended_at is not None and signal.event_time <= topo.ended_at
    ):
        return topo
    if nodes and (topo.ended_at is not None or not topo.nodes):
        return _next_attempt(topo, nodes=nodes, started_at=signal.event_time)
    if nodes:
        return topo.model_copy(update={"nodes": sorted(set(topo.nodes) | set(nodes))})
    if topo.nodes and topo.ended_at is None:
        return topo.model_copy(update={"ended_at": signal.event_time, "end_state": "pods deleted"})
    return topo


def _k8s_scheduled(topo: JobTopology, signal: Signal) -> JobTopology:
    """One pod of a Kubernetes job bound to a node (a ``Scheduled`` Event, when Events reach Kafka
    and ``collect kubernetes`` does not run). The first binding after none, or after the last
    attempt ended, starts an attempt; later ones add their node. A binding from before the current
    attempt's end is a replay and ignored."""
    node = str(signal.node)
    if topo.ended_at is not None and signal.event_time <= topo.ended_at:
        return topo
    if topo.ended_at is not None or not topo.nodes:
        return _next_attempt(topo, nodes=[node], started_at=signal.event_time)
    if node in topo.nodes:
        return topo
    started = min(topo.started_at, signal.event_time) if topo.started_at else signal.event_time
    return topo.model_copy(update={"nodes": sorted({*topo.nodes, node}), "started_at": started})


def _of_the_ended_attempt(window: IncidentWindow, topo: JobTopology | None, signal: Signal) -> bool:
    """The window's attempt has ended and no newer attempt has started, so the signal can only be
    that attempt's: a root that lost the race with the scheduler's end line (another shipper,
    another partition), or ranks the scheduler did not kill at once still printing their watchdog
    timeouts (a requeue after a node failure: the survivors time out on the dead node's collective
    long after the end). Bounded by ``ENDED_ATTEMPT_EVIDENCE``: later than that, the job id has
    been reused (a Kubernetes job deleted and created again) before its new pods were seen."""
    return (
        topo is not None
        and topo.ended_at is not None
        and topo.attempt == window.attempt
        and signal.event_time <= topo.ended_at + ENDED_ATTEMPT_EVIDENCE
    )


def add_signal(
    window: IncidentWindow | None, topo: JobTopology | None, signal: Signal, cluster: str, now: datetime
) -> IncidentWindow | None:
    """Fold one non-topology signal into the job's window (opening one if it initiates)."""
    if window is not None and window.closed:
        if signal.signal_id in window.seen_ids:
            # A record redelivered after a crash or rebalance (at-least-once) must not reopen
            # the incident it already closed under a new id.
            return window
        if _of_the_ended_attempt(window, topo, signal):
            # Evidence of the ended attempt: a refined revision, not a second incident (which the
            # decide step would read as a new failure of a job that is already being restarted).
            window = window.model_copy(update={"closed": False})
        else:
            window = None
    if window is None:
        if signal.role not in OPENING_ROLES:
            return None  # a hint or confirmation alone opens nothing
        window = IncidentWindow(
            job_id=signal.job_id or "?",
            attempt=max(topo.attempt, 1) if topo else 1,
            cluster=cluster,
            opening_signal_id=signal.signal_id,
            opened_at=now,
            last_signal_at=now,
            first_signal_time=signal.event_time,
        )
    if signal.signal_id in window.seen_ids:
        return window  # a replayed record
    seen = [*window.seen_ids, signal.signal_id][-MAX_SEEN_IDS:]
    update: dict[str, object] = {
        "seen_ids": seen,
        "last_signal_at": now,
        "dirty": True,
        "first_signal_time": min(window.first_signal_time, signal.event_time),
    }
    if signal.role == Role.ROOT_CANDIDATE:
        if len(window.roots) < MAX_ROOTS or signal.decisive:  # keep the earliest; never drop a decisive one
            update["roots"] = [*window.roots, signal]
    else:
        tally = window.tallies.get(signal.rule) or RuleTally()
        nodes = (
            tally.nodes if signal.node is None or signal.node in tally.nodes else [*tally.nodes, signal.node]
        )
        ranks = (
            tally.ranks if signal.rank is None or signal.rank in tally.ranks else [*tally.ranks, signal.rank]
        )
        first = signal.event_time if tally.first_seen is None else min(tally.first_seen, signal.event_time)
        samples = tally.samples if len(tally.samples) >= SAMPLES_PER_RULE else [*tally.samples, signal]
        samples = sorted(samples, key=lambda s: s.event_time)
        rank_nodes = tally.rank_nodes
        if signal.rank is not None and signal.node and signal.rank not in rank_nodes:
            rank_nodes = {**rank_nodes, signal.rank: signal.node}
        update["tallies"] = {
            **window.tallies,
            signal.rule: RuleTally(
                count=tally.count + 1,
                nodes=nodes,
                ranks=ranks,
                first_seen=first,
                samples=samples,
                rank_nodes=rank_nodes,
            ),
        }
    return window.model_copy(update=update)


def window_from(signals: list[Signal], cluster: str, job_id: str, now: datetime) -> IncidentWindow | None:
    """One window over a finished set of signals (``sickbay diagnose``), built in a single pass.

    Same contents as folding them one by one with :func:`add_signal`, without copying the
    window per signal.
    """
    ordered = sorted(
        (s for s in signals if s.role in (Role.ROOT_CANDIDATE, Role.CASCADE, Role.CONFIRMATION, Role.HINT)),
        key=lambda s: s.event_time,
    )
    skewed = any(s.rule == PLUGIN_LOADED_RULE for s in ordered)  # attribution.plugin_skew decides
    opening = (
        next((s for s in ordered if s.role in OPENING_ROLES), None)
        or next((s for s in ordered if is_lead(s)), None)
        or next((s for s in ordered if skewed and s.rule == PLUGIN_MISSING_RULE), None)
    )
    if opening is None:
        return None
    roots: list[Signal] = []
    tallies: dict[str, RuleTally] = {}
    seen: set[str] = set()
    for s in ordered:
        if s.signal_id in seen:
            continue
        seen.add(s.signal_id)
        if s.role == Role.ROOT_CANDIDATE:
            if len(roots) < MAX_ROOTS or s.decisive:
                roots.append(s)
            continue
        t = tallies.setdefault(s.rule, RuleTally())
        t.count += 1
        if s.node is not None and s.node not in t.nodes:
            t.nodes.append(s.node)
        if s.rank is not None and s.rank not in t.ranks:
            t.ranks.append(s.rank)
        if s.rank is not None and s.node and s.rank not in t.rank_nodes:
            t.rank_nodes[s.rank] = s.node
        t.first_seen = s.event_time if t.first_seen is None else min(t.first_seen, s.event_time)
        if len(t.samples) < SAMPLES_PER_RULE:
            t.samples.append(s)
    return IncidentWindow(
        job_id=job_id,
        attempt=1,
        cluster=cluster,
        opening_signal_id=opening.signal_id,
        opened_at=now,
        last_signal_at=now,
        first_signal_time=ordered[0].event_time,
        roots=roots,
        tallies=tallies,
    )


def _incident(
    window: IncidentWindow,
    topo: JobTopology | None,
    verdict: Verdict,
    now: datetime,
    status: IncidentStatus,
    provisional: bool,
) -> Incident:
    return Incident(
        incident_id=incident_id(window.cluster, window.job_id, window.attempt, window.opening_signal_id),
        revision=window.revision + 1,
        cluster=window.cluster,
        job_id=window.job_id,
        attempt=window.attempt,
        status=status,
        category=verdict.category,
        root_cause=root_cause(verdict.root),
        supporting=verdict.supporting,
        culprit=verdict.culprit,
        isolate=verdict.isolate,
        restartable=verdict.restartable,
        confidence=verdict.confidence,
        evidence=verdict.evidence,
        coverage=verdict.coverage,
        job_nodes=topo.nodes if topo else [],
        opened_at=window.opened_at,
        updated_at=now,
        first_signal_time=window.first_signal_time,
        provisional=provisional,
    )


def _emit(
    window: IncidentWindow,
    topo: JobTopology | None,
    verdict: Verdict,
    now: datetime,
    closed: bool = False,
    provisional: bool = False,
) -> tuple[IncidentWindow, Incident]:
    status = IncidentStatus.CLOSED if closed else IncidentStatus.OPEN
    incident = _incident(window, topo, verdict, now, status, provisional)
    window = window.model_copy(
        update={
            "revision": incident.revision,
            "fingerprint": verdict.fingerprint(),
            "dirty": False,
            "closed": closed,
            "provisional": provisional,
            "unsent": with_unsent(window, incident),
        }
    )
    return window, incident


def _in_grace(window: IncidentWindow) -> bool:
    """Only cascades so far and no final verdict yet: the root may still be on its way."""
    return not window.roots and (window.revision == 0 or window.provisional)


def _provisional(
    window: IncidentWindow, topo: JobTopology | None, verdict: Verdict, now: datetime, timing: Timing
) -> tuple[IncidentWindow, Incident | None]:
    """Inside the root grace: publish the cascade-only verdict once the window is old enough, and again
    when what actions would depend on changes (the silent rank named once every timeout is in)."""
    after = timing.provisional_after_s
    if after is None or now - window.opened_at < timedelta(seconds=after):
        return window, None
    if window.revision == 0 or verdict.fingerprint() != window.fingerprint:
        return _emit(window, topo, verdict, now, provisional=True)
    return window, None


def _warning(
    window: IncidentWindow, topo: JobTopology | None, verdict: Verdict, now: datetime, closed: bool
) -> tuple[IncidentWindow, Incident | None]:
    """An early-warning root: provisional revisions when it is new or changed, and when the window closes."""
    if closed or window.revision == 0 or verdict.fingerprint() != window.fingerprint:
        return _emit(window, topo, verdict, now, closed=closed, provisional=True)
    return window, None


def failed(topo: JobTopology | None) -> bool:
    """The job's attempt ended other than with exit status 0 (killed, requeued, pods deleted)."""
    return topo is not None and topo.ended_at is not None and topo.end_state != "WEXITSTATUS 0"


def decide_now(
    window: IncidentWindow,
    topo: JobTopology | None,
    now: datetime,
    timing: Timing,
    place: PlaceOf | None = None,
) -> tuple[IncidentWindow, Incident | None]:
    """Emit right away when the verdict is new or changed in what actions depend on."""
    if window.closed:
        return window, None
    verdict = with_history(attribute(window, topo, place), window.attempt, topo)
    if verdict is None:
        return window, None
    if _in_grace(window):
        return _provisional(window, topo, verdict, now, timing)  # the final verdict waits (see tick)
    if window.revision == 0 and verdict.uncorroborated and not failed(topo):
        return window, None  # a lone application-class Xid waits for the job to fail (see tick)
    if verdict.provisional:
        return _warning(window, topo, verdict, now, closed=False)
    if window.revision == 0 or window.provisional or verdict.fingerprint() != window.fingerprint:
        return _emit(window, topo, verdict, now)  # a root ends a provisional verdict at once
    return window, None


def tick(
    window: IncidentWindow,
    topo: JobTopology | None,
    now: datetime,
    timing: Timing,
    place: PlaceOf | None = None,
) -> tuple[IncidentWindow, Incident | None]:
    """Periodic: cascade-only grace, coalesced refinements and closing."""
    if window.closed:
        return window, None
    verdict = with_history(attribute(window, topo, place), window.attempt, topo)
    quiet = (now - window.last_signal_at) >= timedelta(seconds=timing.quiet_s)
    job_over = (
        topo is not None
        and topo.ended_at is not None
        and (now - window.last_signal_at) >= timedelta(seconds=timing.root_grace_s)
    )
    if verdict is None:
        return (window.model_copy(update={"closed": True}), None) if quiet else (window, None)
    if window.revision == 0 and verdict.uncorroborated and not failed(topo):
        # nothing failed: close quietly when the window goes quiet (a job that ends cleanly too)
        closing = quiet or job_over
        return (window.model_copy(update={"closed": True}), None) if closing else (window, None)
    if verdict.provisional:
        return _warning(window, topo, verdict, now, closed=quiet or job_over)
    if window.revision == 0 or window.provisional:
        grace_over = (now - window.opened_at) >= timedelta(seconds=timing.root_grace_s)
        if window.roots or grace_over or quiet or job_over:
            return _emit(window, topo, verdict, now, closed=quiet or job_over)
        return _provisional(window, topo, verdict, now, timing)
    if quiet or job_over:
        return _emit(window, topo, verdict, now, closed=True)
    if window.dirty or verdict.fingerprint() != window.fingerprint:
        return _emit(window, topo, verdict, now)
    return window, None
