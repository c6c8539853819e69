"""The Slurm adapter: carries out drain, resume, requeue and cancel intents, observe-first and idempotent.

- Every node name, hostlist, job id and reason is checked against Slurm's
  grammar (:mod:`connectors.actuators.slurm_names`) before any command is built;
  a bad value, or a node/job the controller does not know, is REJECTED with a
  reason, never sent.
- ``dry_run`` actions (observe mode) are validated against the live cluster (the
  node or job exists) and reported as ``dry_run`` with the command that would run.
- Before acting it observes: a node already drained by sickbay, a job already
  requeued with the wanted exclusions or already ended, is reported ``converged``
  and left alone. That makes a retry safe: a failure that means "the controller
  was not reached" (timeout, connection, SSH) re-runs the whole action, observe
  step included, with exponential backoff; after the last try the result is
  FAILED with what happened, and the runner publishes it like any other.
- Requeue excluding nodes is ``scontrol requeuehold`` → ``scontrol update
  ExcNodeList=`` → ``scontrol release``. Slurm refuses the update while the job
  runs, and a plain requeue followed by the update races the job's next start;
  the held job cannot start until the exclusion is in place. ``ExcNodeList``
  replaces the list, so the full set (old and new) is sent. A job left held by
  a crash half-way is finished on the next attempt (update, then release).
- A drain with ``expires_at`` carries ``expires <UTC time>`` in its Slurm reason;
  :meth:`SlurmAdapter.sweep_expired` resumes sickbay's own drains (reason prefix
  ``sickbay``) whose time has passed and nothing else.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

from connectors.actuators import slurm_names
from connectors.actuators.slurm_backend import SlurmBackend, Unsupported
from schemas.actions import Action, ActionKind, ActionResult, ActionStatus, CommandRun
from schemas.base import utcnow

log = logging.getLogger("sickbay.adapter.slurm")
ADAPTER = "slurm"
REASON_PREFIX = "sickbay"
Outcome = tuple[ActionStatus, list[CommandRun], str]
_EXPIRES = re.compile(r"\bexpires (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")
_INCIDENT = re.compile(r"\[(inc-[^\]\s]+)\]")
_ENDED = {
    "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
    "OUT_OF_MEMORY",
}  # fmt: skip


def _nodes_in(exc_node_list: str) -> set[str]:
    import hostlist

    if not exc_node_list or exc_node_list in ("(null)", "None"):
        return set()
    return set(hostlist.expand_hostlist(exc_node_list))


def expiry_text(at: datetime) -> str:
    """``expires <UTC time>``: no '=' in it, so ``scontrol show -o`` keeps it inside Reason."""
    return "expires " + at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def drain_expiry(reason: str) -> datetime | None:
    """The expiry a sickbay drain reason carries, if any."""
    m = _EXPIRES.search(reason)
    return datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) if m else None


class _Finished(Exception):
    """An outcome reached before any change (bad input, missing or unknown node or job)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome[2])
        self.outcome = outcome


class SlurmAdapter:
    def __init__(
        self,
        cli: SlurmBackend,
        *,
        retries: int = 3,
        backoff_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cli = cli
        self.retries = retries
        self.backoff_s = backoff_s
        self.sleep = sleep

    def handle(self, action: Action) -> ActionResult:
        started = utcnow()
        attempts = 0
        while True:
            attempts += 1
            status, runs, detail = self._attempt(action)
            transient = status == ActionStatus.FAILED and bool(runs) and self.cli.transient(runs[-1])
            if not transient or attempts > self.retries:
                break
            delay = self.backoff_s * 2 ** (attempts - 1)
            log.warning(
                "%s attempt %d failed (%s); retrying in %.2fs", action.action_id, attempts, detail, delay
            )
            self.sleep(delay)
        if attempts > 1:
            detail = f"{detail} (after {attempts} attempts)"
        return self._result(action, status, runs, detail, started)

    def holds(self, action: Action) -> bool | None:
        """Reconciliation: does a fresh observation show the state this action wanted?

        ``None`` when the scheduler cannot be asked right now (the runner asks again). The
        generation is the job's: a requeue holds once the job was requeued (Restarts > 0), is no
        longer held and excludes every wanted node; a drain once the node drains for sickbay.
        """
        try:
            if action.kind in (ActionKind.DRAIN_NODE, ActionKind.RESUME_NODE):
                _node, _show, state = self._node(action)
                draining = "DRAIN" in state.get("State", "")
                if action.kind == ActionKind.RESUME_NODE:
                    return not draining
                return draining and state.get("Reason", "").startswith(REASON_PREFIX)
            _job, _show, state = self._job(action)
            job_state = state.get("JobState", "")
            if action.kind == ActionKind.CANCEL_JOB:
                return job_state in _ENDED
            if action.kind == ActionKind.REQUEUE_JOB:
                held = state.get("Reason", "") == "job_requeued_in_held_state"
                excluded = _nodes_in(state.get("ExcNodeList", ""))
                restarts = int(state.get("Restarts", "0") or 0)
                wanted = set(action.exclude_nodes)
                return restarts > 0 and not held and wanted <= excluded and job_state not in _ENDED
        except _Finished:
            return None
        return None

    @staticmethod
    def _result(
        action: Action, status: ActionStatus, runs: list[CommandRun], detail: str, started: datetime
    ) -> ActionResult:
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
            commands=runs,
            detail=detail,
        )

    def _attempt(self, action: Action) -> Outcome:
        try:
            self._validate(action)
            if action.kind == ActionKind.DRAIN_NODE:
                return self._drain(action)
            if action.kind == ActionKind.REQUEUE_JOB:
                return self._requeue(action)
            if action.kind == ActionKind.RESUME_NODE:
                return self._resume(action)
            if action.kind == ActionKind.CANCEL_JOB:
                return self._cancel(action)
            return ActionStatus.REJECTED, [], f"unsupported action kind {action.kind}"
        except _Finished as finished:
            return finished.outcome
        except slurm_names.InvalidName as exc:
            return ActionStatus.REJECTED, [], str(exc)
        except Unsupported as exc:
            return ActionStatus.REJECTED, [], f"{self.cli.mode} mode: {exc}"
        except Exception as exc:  # a bug or an unexpected backend error: report it, never drop the action
            log.exception("action %s failed unexpectedly", action.action_id)
            return ActionStatus.FAILED, [], f"adapter error: {type(exc).__name__}: {exc}"

    @staticmethod
    def _validate(action: Action) -> None:
        if action.node is not None:
            slurm_names.node_name(action.node)
        if action.job_id is not None:
            slurm_names.job_id(action.job_id)
        slurm_names.node_names(action.exclude_nodes)
        slurm_names.reason(action.reason)

    def _observe(self, entity: str, name: str) -> tuple[CommandRun, dict[str, str]]:
        show, state = self.cli.show(entity, name)
        if state is not None:
            return show, state
        said = show.stderr.strip() or show.stdout.strip()[:200]
        if self.cli.not_found(show):
            raise _Finished(
                (ActionStatus.REJECTED, [show], f"unknown {entity}: {entity} {name} not found ({said})")
            )
        raise _Finished(
            (ActionStatus.FAILED, [show], f"could not observe {entity} {name}: {said or 'no output'}")
        )

    def _node(self, action: Action) -> tuple[str, CommandRun, dict[str, str]]:
        """The node, the query that observed it and its state; a missing or unknown node ends the action."""
        node = action.node
        if not node:
            raise _Finished((ActionStatus.REJECTED, [], f"{action.kind.value} needs a node"))
        show, state = self._observe("node", node)
        return node, show, state

    def _execute(self, show: CommandRun, argv: list[str], dry_run: bool, done: str) -> Outcome:
        """Run one change (or, in observe mode, say what would run)."""
        if dry_run:
            return ActionStatus.DRY_RUN, [show], "would run: " + " ".join(argv)
        run = self.cli.run(argv)
        if run.returncode != 0:
            return ActionStatus.FAILED, [show, run], run.stderr.strip() or f"{argv[0]} failed"
        return ActionStatus.SUCCEEDED, [show, run], done

    def _drain(self, action: Action) -> Outcome:
        node, show, state = self._node(action)
        node_state = state.get("State", "")
        if "DRAIN" in node_state and state.get("Reason", "").startswith(REASON_PREFIX):
            return ActionStatus.CONVERGED, [show], f"{node} already drained by sickbay ({node_state})"
        reason = action.reason
        if action.expires_at is not None and drain_expiry(reason) is None:
            reason = f"{reason} {expiry_text(action.expires_at)}"
        argv = self.cli.drain_argv(node, reason)
        return self._execute(show, argv, action.dry_run, f"{node} drained")

    def _resume(self, action: Action) -> Outcome:
        """Undo a drain (an operator's restore request). Only sickbay's own drains are undone."""
        node, show, state = self._node(action)
        node_state, reason = state.get("State", ""), state.get("Reason", "")
        if "DRAIN" not in node_state:
            return ActionStatus.CONVERGED, [show], f"{node} is not drained ({node_state})"
        if not reason.startswith(REASON_PREFIX):
            detail = f"{node} was drained by someone else ({reason!r}); not resuming"
            return ActionStatus.REJECTED, [show], detail
        return self._execute(show, self.cli.resume_argv(node), action.dry_run, f"{node} resumed")

    def _job(self, action: Action) -> tuple[str, CommandRun, dict[str, str]]:
        job = action.job_id
        if not job:
            raise _Finished((ActionStatus.REJECTED, [], f"{action.kind.value} needs a job id"))
        show, state = self._observe("job", job)
        return job, show, state

    def _cancel(self, action: Action) -> Outcome:
        job, show, state = self._job(action)
        job_state = state.get("JobState", "")
        if job_state in _ENDED:
            return ActionStatus.CONVERGED, [show], f"job {job} already ended ({job_state})"
        return self._execute(show, self.cli.cancel_argv(job), action.dry_run, f"job {job} cancelled")

    def _requeue(self, action: Action) -> Outcome:
        job, show, state = self._job(action)
        wanted = set(slurm_names.node_names(action.exclude_nodes))
        job_state = state.get("JobState", "")
        excluded = _nodes_in(state.get("ExcNodeList", ""))
        restarts = int(state.get("Restarts", "0") or 0)
        held = state.get("Reason", "") == "job_requeued_in_held_state"
        exclude_all = sorted(wanted | excluded)
        if job_state == "PENDING" and restarts > 0 and not held and wanted <= excluded:
            return ActionStatus.CONVERGED, [show], f"job {job} already requeued excluding {sorted(excluded)}"
        if state.get("Requeue") == "0":
            return ActionStatus.REJECTED, [show], f"job {job} was submitted with --no-requeue; not overriding"
        if job_state not in ("RUNNING", "SUSPENDED", "COMPLETING", "PENDING"):
            return ActionStatus.REJECTED, [show], f"job {job} is {job_state}: nothing to requeue"
        delay = int(action.backoff_s)
        plan = [
            self.cli.requeue_hold_argv(job),
            *([self.cli.exclude_argv(job, exclude_all)] if wanted else []),
            *([self.cli.begin_argv(job, delay)] if delay > 0 else []),  # backoff: Slurm holds the start
            self.cli.release_argv(job),
        ]
        if action.dry_run:
            return ActionStatus.DRY_RUN, [show], "would run: " + " ; ".join(" ".join(a) for a in plan)
        runs = [show]
        if held:
            steps = plan[1:]  # a requeue a crash left half-done: exclude, then release
        elif job_state == "PENDING":
            steps = plan[1:-1]  # not started yet: only the exclusion is needed
        else:
            steps = plan
        for argv in steps:
            run = self.cli.run(argv)
            runs.append(run)
            if run.returncode != 0:
                return ActionStatus.FAILED, runs, f"{' '.join(argv)}: {run.stderr.strip() or 'failed'}"
        later = f", not before now+{delay}s" if delay > 0 else ""
        return ActionStatus.SUCCEEDED, runs, f"job {job} requeued excluding {exclude_all}{later}"

    def sweep_expired(
        self, cluster: str, *, now: datetime | None = None, dry_run: bool = False
    ) -> list[ActionResult]:
        """Resume nodes whose sickbay drain has expired. Drains by anyone else, or without an expiry, stay."""
        now = now or utcnow()
        started = utcnow()
        listing, nodes = self.cli.list_nodes()
        if listing.returncode != 0:
            raise RuntimeError(f"could not list nodes: {listing.stderr.strip() or 'no output'}")
        results: list[ActionResult] = []
        for state in nodes:
            node, reason = state.get("NodeName", ""), state.get("Reason", "")
            expires = drain_expiry(reason)
            if "DRAIN" not in state.get("State", "") or not reason.startswith(REASON_PREFIX):
                continue
            if expires is None or expires > now:
                continue
            runs: list[CommandRun]
            try:
                slurm_names.node_name(node)
                argv = self.cli.resume_argv(node)
            except (slurm_names.InvalidName, Unsupported) as exc:
                status, runs, detail = ActionStatus.REJECTED, [], str(exc)
            else:
                status, runs, detail = self._execute(
                    listing, argv, dry_run, f"{node} resumed: sickbay drain expired"
                )
                runs = runs[1:]  # the listing covers every node; keep the node's own command
            key = "sweep:" + hashlib.blake2b(f"{cluster}|{node}|{reason}".encode(), digest_size=8).hexdigest()
            incident = _INCIDENT.search(reason)
            results.append(
                ActionResult(
                    action_id=key,
                    idempotency_key=key,
                    kind=ActionKind.RESUME_NODE,
                    status=status,
                    adapter=ADAPTER,
                    cluster=cluster,
                    incident_id=incident.group(1) if incident else "",
                    started_at=started,
                    finished_at=utcnow(),
                    commands=runs,
                    detail=f"{detail} (expired {expires:%Y-%m-%dT%H:%M:%SZ})",
                )
            )
        return results
