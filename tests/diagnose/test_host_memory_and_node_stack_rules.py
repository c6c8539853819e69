"""Formats the thread set's round 22 taught: host memory the job outgrew, a node whose driver stack
cannot serve its GPUs or its InfiniBand, and what Ray and Abseil print when a job cannot start or
a process dies.

The shapes are real threads' (hiyouga/LLaMA-Factory#720, awslabs/amazon-eks-ami#2769,
NVIDIA/gpu-operator#2868, ray-project/ray#14535, #60376 and #52374); the verdict is what each
thread settled, except where a test says the rule reads the line otherwise. The driver release that
does not know its GPU is read from the kernel module's own message (nv.c), beside its open-module
twin."""

from __future__ import annotations

from tests.diagnose.logs import verdict


def test_pytorchs_cpu_allocator_out_of_memory_is_the_job_outgrowing_the_host(tmp_path):
    lines = [
        "RuntimeError:     [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 180355072 bytes. Error code 12 (Cannot allocate memory)",
    ]
    assert verdict(tmp_path, lines) == ("framework.host_out_of_memory", "application", False, [])


def test_a_proprietary_kernel_module_on_a_gpu_that_needs_the_open_one_is_the_nodes_software(tmp_path):
    """The RmInitAdapter failure that follows is what it caused, not a GPU fault."""
    lines = [
        "Jan 12 03:14:15 ip-10-0-7-21 kernel: NVRM: The NVIDIA GPU 0000:57:00.0 (PCI ID: 10de:2c3a)",
        "Jan 12 03:14:15 ip-10-0-7-21 kernel: NVRM: installed in this system requires use of the NVIDIA open "
        "kernel modules.",
        "Jan 12 03:14:15 ip-10-0-7-21 kernel: NVRM: GPU 0000:57:00.0: RmInitAdapter failed! (0x22:0x56:897)",
    ]
    assert verdict(tmp_path, lines) == (
        "gpu.open_kernel_module_required",
        "system_software",
        False,
        ["ip-10-0-7-21"],
    )


def test_an_rm_init_failure_alone_is_still_the_gpus(tmp_path):
    lines = [
        "Jan 12 03:14:15 gpu-07 kernel: NVRM: GPU 0000:57:00.0: RmInitAdapter failed! (0x26:0xffff:1594)"
    ]
    rule, category, _, isolate = verdict(tmp_path, lines)
    assert (rule, category, isolate) == ("gpu.rm_init_failed", "hardware_gpu", ["gpu-07:0000:57:00.0"])


def test_nvidia_peermem_built_for_another_infiniband_stack_takes_the_node_out(tmp_path):
    lines = [
        "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument",
        "failed to load nvidia-peermem module",
        "Sep  8 17:16:02 gb300-n14 kernel: nvidia_peermem: disagrees about version of symbol "
        "ib_register_peer_memory_client",
        "Sep  8 17:16:02 gb300-n14 kernel: nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -22)",
    ]
    rule, category, restartable, isolate = verdict(tmp_path, lines)
    assert (rule, category, restartable) == ("gpu.peermem_symbol_mismatch", "system_software", False)
    assert isolate == ["gb300-n14"]


def test_rays_object_store_larger_than_dev_shm_is_the_containers_shared_memory(tmp_path):
    lines = [
        "ValueError: The configured object store size exceeds the capacity of /dev/shm. This will harm "
        "performance. To proceed regardless of this warning, you can set RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE=1. "
        "Consider deleting files in /dev/shm or increasing its size with --shm-size in Docker.",
    ]
    assert verdict(tmp_path, lines) == ("infra.shm_exhausted", "infrastructure", False, [])


def test_ray_train_unable_to_start_its_worker_group_waits_the_same_way_again(tmp_path):
    lines = [
        "2025-10-28 14:49:48.318\tAttempting to start training worker group of size 8 with the following "
        "resources: [{'GPU': 1}] * 8",
        "The worker group startup timed out after 30.0 seconds waiting for 8 workers. Potential causes include: "
        "(1) temporary insufficient cluster resources while waiting for autoscaling (ignore this warning in this "
        "case), (2) infeasible resource request where the provided `ScalingConfig` cannot be satisfied), and (3) "
        "transient network issues.",
    ]
    assert verdict(tmp_path, lines) == (
        "scheduler.ray_train_worker_group_timeout",
        "infrastructure",
        False,
        [],
    )


def test_abseils_fatal_signal_report_reads_as_the_signal_it_names(tmp_path):
    """ray#52374 was a Ray core bug (infrastructure in the set); the line alone reads as a segfault."""
    lines = [
        "(RayTrainWorker pid=26009, ip=10.0.152.139) *** SIGSEGV received at time=1744660997 on cpu 20 ***",
        "(RayTrainWorker pid=26009, ip=10.0.152.139) PC: @     0x7033f7acd1be  (unknown)  "
        "ray::gcs::TaskInfoAccessor::AsyncAddTaskEventData()",
    ]
    rule, category, restartable, isolate = verdict(tmp_path, lines)
    assert (rule, category, restartable, isolate) == ("framework.absl_fatal_signal", "application", True, [])


def test_a_driver_release_that_does_not_know_the_gpu_is_the_nodes_software(tmp_path):
    """nv.c's message, wrapped over three kernel lines as the driver prints it: the probe failure
    after it is what it caused."""
    lines = [
        "Jan 12 03:14:15 gpu-07 kernel: NVRM: The NVIDIA GPU 0000:3c:00.0 (PCI ID: 10de:2d04)",
        "Jan 12 03:14:15 gpu-07 kernel: NVRM: installed in this system is not supported by the",
        "Jan 12 03:14:15 gpu-07 kernel: NVRM: NVIDIA 555.58.02 driver release.",
        "Jan 12 03:14:15 gpu-07 kernel: NVRM: The NVIDIA probe routine failed for 1 device(s).",
    ]
    rule, category, restartable, isolate = verdict(tmp_path, lines)
    assert (rule, category, restartable) == ("gpu.driver_unsupported_gpu", "system_software", False)
    assert isolate == ["gpu-07"]
