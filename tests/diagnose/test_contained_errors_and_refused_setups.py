"""Formats the thread set's round 21 taught: a GPU error CUDA contained, Gloo ranks of two address
families, HDF5's I/O error, an object store out of reach and Slurm refusing a job's own account.

Each is a real thread's shape (marin-community/marin#8934, pytorch/pytorch#135355, an HPC course's
fastMRI thread, huaweicloud dls-example#38, ArjunaUsers#225); the verdict is what the thread settled."""

from __future__ import annotations

from tests.diagnose.logs import verdict


def test_an_error_cuda_contained_is_the_gpus_and_worth_a_restart_without_it(tmp_path):
    lines = [
        "Linux gb200-r137-04 6.8.0-1015-nvidia #16-Ubuntu SMP Mon Aug 19 19:38:17 UTC 2024 aarch64 GNU/Linux",
        "[rank5]: RuntimeError: CUDA error: Invalid access of peer GPU memory over nvlink or a hardware error",
        "[rank5]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.",
    ]
    assert verdict(tmp_path, lines) == ("cuda.error_contained", "hardware_gpu", True, ["gb200-r137-04"])


def test_the_driver_apis_contained_error_reads_the_same(tmp_path):
    lines = ["CUDA_ERROR_CONTAINED: Invalid access of peer GPU memory over nvlink or a hardware error"]
    rule, category, restartable, _ = verdict(tmp_path, lines)
    assert (rule, category, restartable) == ("cuda.error_contained", "hardware_gpu", True)


def test_gloo_ranks_bound_to_different_address_families_is_interface_selection(tmp_path):
    lines = [
        "[rank0]: RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:276] "
        "ss1.ss_family == ss2.ss_family. 2 vs 10",
        "[rank1]: RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:276] "
        "ss1.ss_family == ss2.ss_family. 10 vs 2",
    ]
    assert verdict(tmp_path, lines) == ("infra.gloo_connect_failed", "infrastructure", False, [])


def test_hdf5s_input_output_error_is_the_storage_not_the_program(tmp_path):
    lines = [
        "OSError: [Errno 5] Can't read data (file read failed: time = Fri Aug 18 10:50:32 2023",
        ", filename = '../../Data/train/kspace/brain_acc8_48.h5', file descriptor = 25, errno = 5, "
        "error message = 'Input/output error', buf = 0x5fae48a0, total read size = 43892272, "
        "bytes this sub-read = 43892272, bytes actually read = 18446744073709551615, offset = 0)",
    ]
    assert verdict(tmp_path, lines) == ("infra.io_error", "infrastructure", True, [])


def test_an_object_store_that_cannot_be_reached_mid_save_is_worth_a_later_restart(tmp_path):
    lines = [
        "Caused by op u'ModelSaver/save/SaveV2', defined at:",
        '  File "resnet_cloud_multi/imagenet_resnet_cloud.py", line 218, in <module>',
        "    launch_train_with_config(config, trainer)",
        "InternalError (see above for traceback): : Unable to connect to endpoint",
    ]
    assert verdict(tmp_path, lines) == ("infra.object_store_unreachable", "infrastructure", True, [])


def test_slurm_refusing_the_jobs_account_is_the_jobs_submission(tmp_path):
    lines = [
        "sbatch: error: spank: x11.so: Plugin file not found",
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
    ]
    assert verdict(tmp_path, lines) == ("scheduler.slurm_request_rejected", "application", False, [])


def test_slurm_refusing_a_time_limit_over_the_partitions_stays_the_schedulers_limit(tmp_path):
    lines = [
        "sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)"
    ]
    assert verdict(tmp_path, lines) == ("scheduler.slurm_request_rejected", "infrastructure", False, [])
