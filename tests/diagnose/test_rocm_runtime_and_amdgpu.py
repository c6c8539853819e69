"""AMD GPUs by their own texts: PyTorch built for ROCm says the HIP runtime's messages where a CUDA
build says CUDA's, and they mean the same; amdgpu's kernel messages for a GPU that must go (its
retired-page table full, a reset it did not come back from) drain it, and a ring timeout alone is a
hang of unknown cause. A process that sees no ROCm device is the job's settings, not the node's."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict


@pytest.mark.parametrize(
    "message",
    [
        "an illegal memory access was encountered",
        "out of memory",
        "unspecified launch failure",
        "invalid device function",
    ],
)
def test_a_hip_error_reads_as_the_same_cuda_error(tmp_path, message):
    hip = verdict(tmp_path, [f"RuntimeError: HIP error: {message}"])
    cuda = verdict(tmp_path, [f"RuntimeError: CUDA error: {message}"])
    assert hip == cuda


def test_no_visible_rocm_device_is_the_jobs_settings_and_drains_nothing(tmp_path):
    """Unlike NVIDIA's "no CUDA-capable device", on AMD nodes this is mostly what the process was
    allowed to see (HIP_VISIBLE_DEVICES, --gpu-bind, the container's devices)."""
    line = (
        "Jan 12 03:14:15 mi300-07 python[1234]: RuntimeError: HIP error: no ROCm-capable device is detected"
    )
    assert verdict(tmp_path, [line]) == ("cuda.rocm_no_visible_device", "application", False, [])


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        (
            "Jan 12 03:14:15 mi300-07 kernel: amdgpu 0000:c1:00.0: amdgpu: Saved bad pages(257) reaches threshold value(256).",
            "gpu.amd_bad_page_threshold",
        ),
        (
            "Jan 12 03:14:15 mi300-07 kernel: amdgpu 0000:c1:00.0: amdgpu: GPU reset(2) failed",
            "gpu.amd_reset_failed",
        ),
    ],
)
def test_an_amd_gpu_that_must_be_replaced_or_rebooted_is_drained(tmp_path, line, rule):
    assert verdict(tmp_path, [line]) == (rule, "hardware_gpu", True, ["mi300-07:0000:c1:00.0"])


def test_a_ring_timeout_is_a_hang_of_unknown_cause_until_a_gpu_fault_explains_it(tmp_path):
    timeout = (
        "Jan 12 03:14:10 mi300-07 kernel: amdgpu 0000:c1:00.0: [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring "
        "comp_1.0.0 timeout, signaled seq=4231, emitted seq=4233"
    )
    assert verdict(tmp_path, [timeout]) == ("gpu.amd_ring_timeout", "unknown", True, [])
    failed = "Jan 12 03:14:15 mi300-07 kernel: amdgpu 0000:c1:00.0: amdgpu: GPU reset(1) failed"
    assert verdict(tmp_path, [timeout, failed])[0] == "gpu.amd_reset_failed"
    recovered = "Jan 12 03:14:10 mi300-07 kernel: [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, but soft recovered"
    assert verdict(tmp_path, [recovered])[0] is None
