"""Collective timeouts outside NCCL read as NCCL's watchdog timeouts do: the rank that logs one
waited for a peer, so it is a cascade behind the peer's own failure, never the cause.

Gloo's "Timed out waiting Nms for recv operation to complete" (unbound_buffer.cc) and JAX's
coordination service losing a task's heartbeat are the shapes real jobs print (CosyVoice#297 and
jax#23599 in the thread set). NVRx's rank monitor timing out a rank's heartbeat is the same kind of
report, read from its own source (rank_monitor_server.py)."""

from __future__ import annotations

from tests.diagnose.logs import verdict

GLOO = (
    "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
    "1800000ms for recv operation to complete"
)
JAX = (
    "2024-10-09 15:47:38.568412: E external/xla/xla/tsl/distributed_runtime/coordination/"
    "coordination_service.cc:1170] /job:jax_worker/replica:0/task:0 has been set to ERROR in coordination "
    "service: UNAVAILABLE: Task /job:jax_worker/replica:0/task:0 heartbeat timeout. This indicates that the "
    "remote task has failed, got preempted, or crashed unexpectedly. Check the task logs for an earlier error "
    "to debug further."
)


def test_a_gloo_timeout_alone_is_a_cascade_of_unknown_cause(tmp_path):
    assert verdict(tmp_path, [GLOO]) == ("nccl.gloo_timeout", "unknown", True, [])


def test_a_gloo_timeout_stands_behind_the_peers_own_error(tmp_path):
    lines = ["[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", GLOO]
    rule, category, restartable, _ = verdict(tmp_path, lines)
    assert (rule, category, restartable) == ("cuda.out_of_memory", "application", False)


def test_a_monitored_barriers_gloo_timeout_leaves_the_missing_rank_the_root(tmp_path):
    lines = [
        "[rank0]: RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 30000 ms",
        "[rank0]:  Original exception: ",
        "[rank0]: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 30000ms for recv "
        "operation to complete",
    ]
    assert verdict(tmp_path, lines)[0] == "nccl.monitored_barrier_missed"


def test_jaxs_lost_task_heartbeat_is_a_cascade_behind_the_tasks_own_error(tmp_path):
    assert verdict(tmp_path, [JAX]) == ("framework.jax_task_heartbeat_timeout", "unknown", True, [])
    lines = [
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate",
        JAX,
    ]
    assert verdict(tmp_path, lines)[1] == "application"


def test_nvrx_timing_out_a_hung_rank_is_a_cascade_naming_the_rank(tmp_path):
    """NVRx's rank monitor (rank_monitor_server.py) times out every rank of a hung job: the rank it
    names is where the hang was seen, and a root beside it (here an Xid) is the cause."""
    timeout = (
        "[2025-03-04 10:11:12,345] [WARNING] [RankMonServer48213@gpu-node-07:17] Did not get subsequent heartbeat. "
        "Waited 2700.00 seconds."
    )
    assert verdict(tmp_path, [timeout]) == ("framework.nvrx_rank_timeout", "unknown", True, [])
    xid = "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    assert verdict(tmp_path, [timeout, xid])[:2] == ("gpu.xid", "hardware_gpu")
