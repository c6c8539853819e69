"""The Slurm adapter: carries out drain, resume and requeue intents, observe-first and idempotent.

- ``dry_run`` actions (observe mode) are validated against the live cluster (the
  node or job exists) and reported as ``dry_run`` with the command that would run.
- Before acting it observes: a node already drained by sickbay, or a job already
  requeued with the wanted exclusions, is reported ``converged`` and left alone.
- Requeue excluding nodes is ``scontrol requeuehold`` → ``scontrol update
  ExcNodeList=`` → ``scontrol release``. Slurm refuses the update while the job
  runs, and a plain requeue followed by the update races the job's next start;
  the held job cannot start until the exclusion is in place. ``ExcNodeList``
  replaces the list, so the full set (old and new) is sent. A job left held by
  a crash half-way is finished on the next attempt (update, then release).
"""

from __future__ import annotations

import logging

from connectors.actuators.slurm_cli import SlurmCli
from schemas.actions import Action, ActionKind, ActionResult, ActionStatus, CommandRun
from schemas.base import utcnow

log = logging.getLogger("sickbay.adapter.slurm")
ADAPTER = "slurm"
Outcome = tuple[ActionStatus, list[CommandRun], str]


def _nodes_in(exc_node_list: str) -> set[str]:
    import hostlist

    if not exc_node_list or exc_node_list in ("(null)", "None"):
        return set()
    return set(hostlist.expand_hostlist(exc_node_list))


class _Finished(Exception):
    """An outcome reached before any change (missing or unknown node)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome[2])
        self.outcome = outcome


class SlurmAdapter:
    def __init__(self, cli: SlurmCli) -> None:
        self.cli = cli

    def handle(self, action: Action) -> ActionResult:
        started = utcnow()
        try:
            if action.kind == ActionKind.DRAIN_NODE:
                status, runs, detail = self._drain(action)
            elif action.kind == ActionKind.REQUEUE_JOB:
                status, runs, detail = self._requeue(action)
            elif action.kind == ActionKind.RESUME_NODE:
                status, runs, detail = self._resume(action)
            else:  # pragma: no cover - the enum is closed today
                status, runs, detail = ActionStatus.REJECTED, [], f"unsupported action kind {action.kind}"
        except _Finished as finished:
            status, runs, detail = finished.outcome
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

    def _node(self, action: Action) -> tuple[str, CommandRun, dict[str, str]]:
        """The node, the query that observed it and its state; a missing or unknown node ends the action."""
        node = action.node
        if not node:
            raise _Finished((ActionStatus.REJECTED, [], f"{action.kind.value} needs a node"))
        show, state = self.cli.show("node", node)
        if state is None:
            raise _Finished((ActionStatus.FAILED, [show], f"node {node} not found: {show.stderr.strip()}"))
        return node, show, state

    def _execute(self, show: CommandRun, argv: list[str], dry_run: bool, done: str) -> Outcome:
        """Run one change (or, in observe mode, say what would run)."""
        if dry_run:
            return ActionStatus.DRY_RUN, [show], "would run: " + " ".join(argv)
        run = self.cli.run(argv)
        if run.returncode != 0:
            return ActionStatus.FAILED, [show, run], run.stderr.strip() or "scontrol failed"
        return ActionStatus.SUCCEEDED, [show, run], done

    def _drain(self, action: Action) -> Outcome:
        node, show, state = self._node(action)
        node_state = state.get("State", "")
        if "DRAIN" in node_state and state.get("Reason", "").startswith("sickbay"):
            return ActionStatus.CONVERGED, [show], f"{node} already drained by sickbay ({node_state})"
        argv = self.cli.drain_argv(node, action.reason)
        return self._execute(show, argv, action.dry_run, f"{node} drained")

    def _resume(self, action: Action) -> Outcome:
        """Undo a drain (an operator's restore request). Only sickbay's own drains are undone."""
        node, show, state = self._node(action)
        node_state, reason = state.get("State", ""), state.get("Reason", "")
        if "DRAIN" not in node_state:
            return ActionStatus.CONVERGED, [show], f"{node} is not drained ({node_state})"
        if not reason.startswith("sickbay"):
            detail = f"{node} was drained by someone else ({reason!r}); not resuming"
            return ActionStatus.REJECTED, [show], detail
        return self._execute(show, self.cli.resume_argv(node), action.dry_run, f"{node} resumed")

    def _requeue(self, action: Action) -> Outcome:
        job = action.job_id
        if not job:
            return ActionStatus.REJECTED, [], "requeue_job needs a job id"
        show, state = self.cli.show("job", job)
        if state is None:
            return ActionStatus.FAILED, [show], f"job {job} not found: {show.stderr.strip()}"
        wanted = set(action.exclude_nodes)
        job_state = state.get("JobState", "")
        excluded = _nodes_in(state.get("ExcNodeList", ""))
        restarts = int(state.get("Restarts", "0") or 0)
        held = state.get("Reason", "") == "job_requeued_in_held_state"
        exclude_all = sorted(wanted | excluded)
        plan = [
            self.cli.requeue_hold_argv(job),
            *([self.cli.exclude_argv(job, exclude_all)] if wanted else []),
            self.cli.release_argv(job),
        ]
        if job_state == "PENDING" and restarts > 0 and not held and wanted <= excluded:
            return ActionStatus.CONVERGED, [show], f"job {job} already requeued excluding {sorted(excluded)}"
        if state.get("Requeue") == "0":
            return ActionStatus.REJECTED, [show], f"job {job} was submitted with --no-requeue; not overriding"
        if job_state not in ("RUNNING", "SUSPENDED", "COMPLETING", "PENDING"):
            return ActionStatus.REJECTED, [show], f"job {job} is {job_state}: nothing to requeue"
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
        return ActionStatus.SUCCEEDED, runs, f"job {job} requeued excluding {exclude_all}"
