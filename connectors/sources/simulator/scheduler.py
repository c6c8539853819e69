"""Scheduler events: slurmctld, slurmstepd and srun lines (failure-signatures.md §4.6), and
Kubernetes events as an event exporter logs them (events.k8s.io/v1 fields, ecosystem.md §3.2)."""

from __future__ import annotations

from datetime import datetime

from connectors.sources.simulator.fleet import Job
from connectors.sources.simulator.rand import Rng
from schemas import codec


def ctld_stamp(t: datetime) -> str:
    return f"[{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond // 1000:03d}]"


def submit(job: Job, rng: Rng) -> str:
    prio, usec = rng.randint(1, 9000), rng.randint(300, 3000)
    return f"_slurm_rpc_submit_batch_job: JobId={job.job_id} InitPrio={prio} usec={usec}"


def allocate(job: Job, nodes: str) -> str:
    cpus = len(job.nodes) * 64
    return f"sched: Allocate JobId={job.job_id} NodeList={nodes} #CPUs={cpus} Partition={job.partition}"


def backfill_start(job: Job, nodes: str) -> str:
    return f"sched/backfill: _start_job: Started JobId={job.job_id} in {job.partition} on {nodes}"


def job_complete(job: Job, how: str, status: int) -> list[str]:
    return [f"_job_complete: JobId={job.job_id} {how} {status}", f"_job_complete: JobId={job.job_id} done"]


def requeue_node_failure(job: Job, node: str) -> list[str]:
    return [f"requeue job JobId={job.job_id} due to failure of node {node}", f"Requeuing JobId={job.job_id}"]


def requeuing(job: Job) -> str:
    return f"Requeuing JobId={job.job_id}"


def node_not_responding(node: str) -> str:
    return f"error: Nodes {node} not responding, setting DOWN"


def killing_on_failed(job: Job, node: str) -> str:
    return f"Killing JobId={job.job_id} on failed node {node}"


def drain_reason(node: str, reason: str) -> str:
    return f"update_node: node {node} reason set to: {reason}"


def unexpected_reboot(node: str, boot: int, last: int) -> str:
    return f"validate_node_specs: Node {node} unexpectedly rebooted boot_time={boot} last response={last}"


# -- slurmstepd / srun, in the job's output --------------------------------------------------------


def stepd_cancelled(job: Job, node: str, t: datetime, why: str | None, step: str | None = None) -> str:
    what = f"STEP {job.job_id}.{step}" if step is not None else f"JOB {job.job_id}"
    due = f" DUE TO {why}" if why else ""
    return f"slurmstepd: error: *** {what} ON {node} CANCELLED AT {t:%Y-%m-%dT%H:%M:%S}{due} ***"


def stepd_oom(job: Job, step: str) -> str:
    return (
        f"slurmstepd: error: Detected 1 oom_kill event in StepId={job.job_id}.{step}. "
        "Some of the step tasks have been OOM Killed."
    )


def srun_exit(node: str, task: int, code: int) -> str:
    return f"srun: error: {node}: task {task}: Exited with exit code {code}"


def srun_oom(node: str, task: int) -> str:
    return f"srun: error: {node}: task {task}: Out Of Memory"


def srun_abort(wait: int) -> list[str]:
    return [f"srun: Job step aborted: Waiting up to {wait} seconds for job step to finish."]


# -- Kubernetes ---------------------------------------------------------------------------------


def k8s_event(
    rng: Rng,
    t: datetime,
    namespace: str,
    kind: str,
    name: str,
    uid: str,
    reason: str,
    note: str,
    *,
    type_: str = "Normal",
    controller: str = "kubelet",
    action: str | None = None,
) -> str:
    """An ``events.k8s.io/v1`` Event as an event exporter prints it (one JSON object per line)."""
    stamp = f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond:06d}Z"
    event = {
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": {"name": f"{name}.{rng.hexstr(16)}", "namespace": namespace},
        "eventTime": stamp,
        "reportingController": controller,
        "reportingInstance": f"{controller}-{rng.alnum(5)}",
        "action": action or reason,
        "reason": reason,
        "regarding": {"kind": kind, "namespace": namespace, "name": name, "uid": uid},
        "note": note,
        "type": type_,
    }
    return codec.dumps(event).decode()
