"""Ray's own failure texts (python/ray/exceptions.py, the raylet's and core worker's exit details,
Ray Train's wrappers), read the way the other runtimes' lists were: what follows a dead worker,
raylet, node or owner is a cascade behind whatever killed it; what says the job asked for too much
(the memory monitor's kills, a full object store) or could not build its environment is a root."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict, verdict_and_culprit

CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.15 GiB of which 1.2 GiB is free."
)


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        (
            "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task. Check "
            "python-core-worker-*.log files for more information.",
            "scheduler.ray_actor_died",
        ),
        (
            "ray.exceptions.RayActorError: The actor experienced an error before finishing this task.",
            "scheduler.ray_actor_died",
        ),
        (
            "The actor is dead because its owner has died. Owner Id: 01000000ffffffff Owner Ip address: 10.0.0.5 "
            "Owner worker exit type: SYSTEM_ERROR",
            "scheduler.ray_actor_died",
        ),
        (
            "Worker exit type: SYSTEM_ERROR Worker exit detail: The leased worker has unrecoverable failure. Worker is "
            "requested to be destroyed when it is returned.",
            "scheduler.ray_actor_died",
        ),
        (
            "ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more information.",
            "scheduler.ray_runtime_died",
        ),
        (
            "[2024-05-01 10:00:00,000 E 1234 1234] core_worker.cc:2000: Raylet is terminated. Termination is "
            "unexpected. Possible reasons include: (1) SIGKILL by the user or system OOM killer, (2) Invalid memory "
            "access from Raylet causing SIGSEGV or SIGBUS, (3) Other termination signals.",
            "scheduler.ray_runtime_died",
        ),
        (
            "[2024-05-01 10:00:00,000 C 1234 1234] gcs_rpc_client.h:212: Failed to connect to GCS within 60 seconds. "
            "GCS may have been killed.",
            "scheduler.ray_runtime_died",
        ),
        (
            "All copies of 00ffffffffffffffffffffffffffffffffffffff0100000001000000 have been lost due to node "
            "failure. Check cluster logs (`/tmp/ray/session_latest/logs`) for more information about the failure.",
            "scheduler.ray_dependency_lost",
        ),
        (
            "ray.exceptions.OwnerDiedError: Failed to retrieve object 00ffff. To see information about where this "
            "ObjectRef was created in Python, set the environment variable RAY_record_ref_creation_sites=1",
            "scheduler.ray_dependency_lost",
        ),
        (
            "ray.exceptions.TaskPlacementGroupRemoved: The placement group corresponding to this task has been removed.",
            "scheduler.ray_dependency_lost",
        ),
        (
            "ray.exceptions.TaskUnschedulableError: The task is not schedulable: The node specified via "
            "NodeAffinitySchedulingStrategy doesn't exist any more or is infeasible, and soft=False was specified.",
            "scheduler.ray_dependency_lost",
        ),
        (
            "ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect the previous error "
            "messages for a cause.",
            "scheduler.ray_train_run_failed",
        ),
        (
            "ray.tune.error.TuneError: Trials did not complete: [TorchTrainer_1a2b3_00000]",
            "scheduler.ray_train_run_failed",
        ),
    ],
)
def test_what_follows_a_dead_worker_raylet_or_owner_is_a_cascade_behind_the_cause(tmp_path, line, rule):
    """Alone, the line says only that something died: unknown, and a restart may place the work
    elsewhere. Beside the error that killed the worker, that error is the verdict (the Python
    catch-all no longer reads Ray's wrapper exceptions as the program's own)."""
    assert verdict(tmp_path, [line]) == (rule, "unknown", True, [])
    assert verdict(tmp_path, [line, CUDA_OOM])[:3] == ("cuda.out_of_memory", "application", False)


def test_the_memory_monitors_kill_summary_is_the_jobs_host_memory(tmp_path):
    killed = (
        "(raylet) [2023-04-09 07:23:59,445 E 395 395] (raylet) node_manager.cc:3049: 10 Workers (tasks / actors) "
        "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: e5d953ef, IP: "
        "10.0.62.231) over the last time period."
    )
    none_killed = killed.replace(": 10 Workers", ": 0 Workers").replace(
        "0 Workers crashed", "3 Workers crashed"
    )
    assert verdict(tmp_path, [killed])[:3] == ("scheduler.ray_oom_kill", "application", False)
    assert verdict(tmp_path, [none_killed])[0] != "scheduler.ray_oom_kill"


def test_a_node_death_recorded_as_missed_heartbeats_reads_as_the_node_marked_dead(tmp_path):
    line = "ray.exceptions.NodeDiedError: Unexpected termination: health check failed due to missing too many heartbeats"
    assert verdict(tmp_path, [line]) == ("scheduler.ray_node_dead", "unknown", True, [])


def test_a_full_object_store_is_the_programs_and_not_worth_a_plain_restart(tmp_path):
    line = (
        "ray.exceptions.ObjectStoreFullError: Failed to put object 00ffff in object store because it is full. "
        "Object size is 2147483648 bytes."
    )
    assert verdict(tmp_path, [line]) == ("scheduler.ray_object_store_full", "application", False, [])


def test_an_actor_constructor_that_raised_yields_to_the_exception_it_raised(tmp_path):
    init = (
        "Worker exit type: USER_ERROR Worker exit detail: Worker exits because there was an exception in the "
        "initialization method (e.g., __init__). Fix the exceptions from the initialization to resolve the issue."
    )
    assert verdict(tmp_path, [init])[:3] == ("scheduler.ray_actor_init_failed", "application", False)
    assert verdict(tmp_path, [init, CUDA_OOM])[0] == "cuda.out_of_memory"


def test_a_runtime_environment_that_cannot_be_built_is_the_jobs_environment(tmp_path):
    line = "ray.exceptions.RuntimeEnvSetupError: Failed to set up runtime environment."
    assert verdict(tmp_path, [line])[:3] == ("scheduler.ray_runtime_env_failed", "infrastructure", False)


@pytest.mark.parametrize(
    "line",
    [
        "The actor is dead because all references to the actor were removed.",
        "The actor is dead because it was killed by `ray.kill`.",
        "Worker exit type: INTENDED_USER_EXIT Worker exit detail: Worker exits by an user request. exit_actor() is called.",
        "Raylet is terminated. Termination is graceful.",
    ],
)
def test_an_actor_or_raylet_ended_on_purpose_says_nothing(tmp_path, line):
    assert verdict(tmp_path, [line]) == (None, "unknown", True, [])


def test_a_task_that_failed_because_its_node_died_names_that_node(tmp_path):
    """normal_task_submitter.cc's text names the dead node's address, as the GCS's marked-dead line
    does: the node is the culprit, nothing is drained on Ray's word alone."""
    line = (
        "RuntimeError: Job 139393033556432 failed: Task failed because the node it was running on is dead or "
        "unavailable. Node IP: 10.48.75.241, node ID: 97d5a2526a8e8ccc56f29e1a8d9c03b108f4e9950ebfa00fa469bb3e."
    )
    got = verdict_and_culprit(tmp_path, [line])
    assert got[:4] == ("scheduler.ray_node_dead", "unknown", True, [])
    assert "10.48.75.241" in str(got[4])
