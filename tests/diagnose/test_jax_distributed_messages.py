"""JAX's multi-host runtime (XLA's coordination service and PjRt client) when a task goes away: the
survivors' lines are a cascade naming the lost task, and a start-up barrier that never filled is the
rendezvous, as torchrun's is."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict

OOM = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4294967296 bytes."


@pytest.mark.parametrize(
    "line",
    [
        "E1205 10:11:12.123456 4411 client.cc:74] Coordination service agent in error status: UNAVAILABLE: The "
        "following tasks are unhealthy (stopped sending heartbeats):",
        "Terminating process because the JAX distributed service detected fatal errors. This most likely indicates "
        "that another task died; see the other task logs for more details. Disable Python buffering, i.e. `python -u`, "
        "to be sure to see all the previous output. absl::Status: DEADLINE_EXCEEDED: Deadline Exceeded",
    ],
)
def test_a_survivors_report_of_a_lost_task_is_a_cascade_behind_the_tasks_own_error(tmp_path, line):
    assert verdict(tmp_path, [line])[:3] == ("framework.jax_task_heartbeat_timeout", "unknown", True)
    assert verdict(tmp_path, [line, OOM])[0] == "cuda.xla_out_of_memory"


def test_jaxs_startup_barrier_timing_out_is_the_rendezvous(tmp_path):
    line = (
        "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: PjRT_Client_Connect. "
        "Timed out task names:"
    )
    torch = verdict(tmp_path, ["torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"])
    assert verdict(tmp_path, [line])[:3] == torch[:3] == ("infra.rendezvous_timeout", "infrastructure", True)
