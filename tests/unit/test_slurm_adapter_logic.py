"""The Slurm adapter's decisions with a scripted scontrol: validation, retries, rejections, cancel, expiry.

The executor is the real :class:`SlurmCli` (real argv building and failure
classification); only the process runner is scripted, so these tests pin what
the adapter runs and when, without a cluster. The real-cluster behaviour is in
tests/integration/test_slurm_modes.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from connectors.actuators.slurm_adapter import SlurmAdapter, drain_expiry
from connectors.actuators.slurm_cli import SlurmCli
from schemas.actions import ActionKind, ActionStatus
from tests.factories import slurm_action

Reply = tuple[int, str, str]


class Scripted:
    """A subprocess.run stand-in: answers each argv with the first matching rule, records every call."""

    def __init__(self, rules: list[tuple[Callable[[list[str]], bool], Reply | list[Reply]]]) -> None:
        self.rules = rules
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        for match, reply in self.rules:
            if match(argv):
                rc, out, err = (
                    reply.pop(0)
                    if isinstance(reply, list) and len(reply) > 1
                    else (reply[0] if isinstance(reply, list) else reply)
                )
                return subprocess.CompletedProcess(argv, rc, out, err)
        raise AssertionError(f"unexpected command {argv}")


def starts(*prefix: str) -> Callable[[list[str]], bool]:
    return lambda argv: argv[: len(prefix)] == list(prefix)


IDLE = "NodeName=gpu-03 State=IDLE Reason=(null)"
DOWN = (1, "", "slurm_load_node error: Unable to contact slurm controller (connect failure)")


def adapter(runner: Scripted, sleeps: list[float] | None = None, retries: int = 3) -> SlurmAdapter:
    record = sleeps if sleeps is not None else []
    return SlurmAdapter(SlurmCli(runner=runner), retries=retries, backoff_s=0.5, sleep=record.append)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"node": "gpu-03 State=RESUME"}, "invalid Slurm node name"),
        ({"node": "-h"}, "invalid Slurm node name"),
        ({"node": "gpu-03", "reason": "sickbay: a\nb"}, "control characters"),
    ],
)
def test_a_bad_node_name_or_reason_is_rejected_before_any_command(fields, message):
    runner = Scripted([])
    result = adapter(runner).handle(slurm_action(ActionKind.DRAIN_NODE, **fields))
    assert result.status == ActionStatus.REJECTED
    assert message in result.detail
    assert runner.calls == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"job_id": "12;id"}, "invalid Slurm job id"),
        ({"job_id": "12", "exclude_nodes": ["gpu-[01-"]}, "invalid Slurm hostlist"),
    ],
)
def test_a_bad_job_id_or_exclusion_list_is_rejected_before_any_command(fields, message):
    runner = Scripted([])
    result = adapter(runner).handle(slurm_action(ActionKind.REQUEUE_JOB, **fields))
    assert result.status == ActionStatus.REJECTED and message in result.detail
    assert runner.calls == []


def test_an_unknown_node_is_rejected_with_slurms_answer():
    runner = Scripted([(starts("scontrol", "show", "node"), (1, "", "Node gpu-99 not found"))])
    result = adapter(runner).handle(slurm_action(ActionKind.DRAIN_NODE, node="gpu-99"))
    assert result.status == ActionStatus.REJECTED
    assert result.detail.startswith("unknown node: node gpu-99 not found")
    assert len(runner.calls) == 1


def test_an_unreachable_controller_is_retried_with_backoff_then_reported_failed():
    runner = Scripted([(starts("scontrol", "show"), DOWN)])
    sleeps: list[float] = []
    result = adapter(runner, sleeps).handle(slurm_action(ActionKind.DRAIN_NODE, node="gpu-03"))
    assert result.status == ActionStatus.FAILED
    assert "Unable to contact slurm controller" in result.detail and "(after 4 attempts)" in result.detail
    assert sleeps == [0.5, 1.0, 2.0]
    assert len(runner.calls) == 4


def test_a_retry_observes_again_so_a_drain_that_landed_is_converged_not_repeated():
    drained = "NodeName=gpu-03 State=IDLE+DRAIN Reason=sickbay: Xid 79 [inc-1]"
    runner = Scripted(
        [
            (starts("scontrol", "show"), [(0, IDLE, ""), (0, drained, "")]),
            (starts("scontrol", "update"), (124, "", "")),  # timed out, but the controller applied it
        ]
    )
    sleeps: list[float] = []
    result = adapter(runner, sleeps).handle(slurm_action(ActionKind.DRAIN_NODE, node="gpu-03"))
    assert result.status == ActionStatus.CONVERGED
    assert sleeps == [0.5]
    assert [c[1] for c in runner.calls] == ["show", "update", "show"]


def test_a_refusal_by_slurm_is_not_retried():
    runner = Scripted(
        [
            (starts("scontrol", "show"), (0, IDLE, "")),
            (starts("scontrol", "update"), (1, "", "slurm_update error: Invalid node state specified")),
        ]
    )
    sleeps: list[float] = []
    result = adapter(runner, sleeps).handle(slurm_action(ActionKind.DRAIN_NODE, node="gpu-03"))
    assert result.status == ActionStatus.FAILED and "Invalid node state" in result.detail
    assert sleeps == []


def test_an_unexpected_error_becomes_a_failed_result_not_an_exception():
    def broken(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        raise PermissionError("scontrol: permission denied")

    result = SlurmAdapter(SlurmCli(runner=broken), sleep=lambda _: None).handle(
        slurm_action(ActionKind.DRAIN_NODE, node="gpu-03")
    )
    assert result.status == ActionStatus.FAILED
    assert result.detail == "adapter error: PermissionError: scontrol: permission denied"


def test_a_drain_with_an_expiry_carries_it_in_the_slurm_reason():
    runner = Scripted(
        [(starts("scontrol", "show"), (0, IDLE, "")), (starts("scontrol", "update"), (0, "", ""))]
    )
    until = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
    result = adapter(runner).handle(
        slurm_action(ActionKind.DRAIN_NODE, node="gpu-03", reason="sickbay: Xid 79 [inc-1]", expires_at=until)
    )
    assert result.status == ActionStatus.SUCCEEDED
    reason = runner.calls[-1][-1]
    assert reason == "Reason=sickbay: Xid 79 [inc-1] expires 2026-11-30T03:00:00Z"
    assert drain_expiry(reason) == until


def test_cancel_runs_scancel_on_a_running_job_and_converges_on_an_ended_one():
    runner = Scripted(
        [
            (
                starts("scontrol", "show", "job"),
                [(0, "JobId=77_2 JobState=RUNNING", ""), (0, "JobState=CANCELLED", "")],
            ),
            (starts("scancel"), (0, "", "")),
        ]
    )
    a = adapter(runner)
    first = a.handle(slurm_action(ActionKind.CANCEL_JOB, job_id="77_2"))
    assert first.status == ActionStatus.SUCCEEDED
    assert runner.calls[-1] == ["scancel", "77_2"]
    again = a.handle(slurm_action(ActionKind.CANCEL_JOB, job_id="77_2"))
    assert again.status == ActionStatus.CONVERGED and "already ended (CANCELLED)" in again.detail


def test_cancel_in_observe_mode_only_says_what_it_would_run():
    runner = Scripted([(starts("scontrol", "show", "job"), (0, "JobId=78 JobState=PENDING", ""))])
    result = adapter(runner).handle(slurm_action(ActionKind.CANCEL_JOB, job_id="78", dry_run=True))
    assert result.status == ActionStatus.DRY_RUN and result.detail == "would run: scancel 78"
    assert len(runner.calls) == 1


def test_the_sweep_resumes_only_expired_sickbay_drains():
    now = datetime(2026, 11, 29, 22, 0, tzinfo=UTC)
    past, future = now - timedelta(minutes=1), now + timedelta(hours=1)
    listing = "\n".join(
        [
            f"NodeName=gpu-01 State=IDLE+DRAIN Reason=sickbay: Xid 79 [inc-a] expires {past:%Y-%m-%dT%H:%M:%SZ}",
            f"NodeName=gpu-02 State=IDLE+DRAIN Reason=sickbay: Xid 48 [inc-b] expires {future:%Y-%m-%dT%H:%M:%SZ}",
            f"NodeName=gpu-03 State=IDLE+DRAIN Reason=admin: memtest expires {past:%Y-%m-%dT%H:%M:%SZ}",
            "NodeName=gpu-04 State=IDLE+DRAIN Reason=sickbay: no expiry [inc-c]",
            f"NodeName=gpu-05 State=IDLE Reason=sickbay: old [inc-d] expires {past:%Y-%m-%dT%H:%M:%SZ}",
        ]
    )
    runner = Scripted(
        [
            (starts("scontrol", "show", "node", "-o"), (0, listing, "")),
            (starts("scontrol", "update"), (0, "", "")),
        ]
    )
    results = adapter(runner).sweep_expired("it", now=now)
    assert [r.status for r in results] == [ActionStatus.SUCCEEDED]
    assert results[0].incident_id == "inc-a" and results[0].kind == ActionKind.RESUME_NODE
    assert results[0].commands[0].argv == ["scontrol", "update", "NodeName=gpu-01", "State=RESUME"]
    assert runner.calls[-1] == ["scontrol", "update", "NodeName=gpu-01", "State=RESUME"]


def test_the_sweep_fails_loudly_when_the_controller_cannot_list_nodes():
    runner = Scripted([(starts("scontrol", "show"), DOWN)])
    with pytest.raises(RuntimeError, match="could not list nodes"):
        adapter(runner).sweep_expired("it")
