"""Messages PyTorch, Hugging Face libraries and srun print about the environment, read as the
environment's: a CUDA stack built for another CUDA or cuDNN, the open-file limit behind DataLoader's
descriptor passing, a dataset the Hub cannot be reached for, a step srun could not launch."""

from __future__ import annotations

from tests.diagnose.logs import verdict


def test_torchvision_built_for_another_cuda_than_torch_is_the_software_stack(tmp_path):
    lines = [
        "RuntimeError: Detected that PyTorch and torchvision were compiled with different CUDA major versions. "
        "PyTorch has CUDA Version=11.8 and torchvision has CUDA Version=12.1. Please reinstall the torchvision "
        "that matches your PyTorch install.",
    ]
    assert verdict(tmp_path, lines) == ("framework.cuda_build_skew", "system_software", False, [])


def test_an_older_cudnn_at_run_time_than_torch_was_built_against_is_the_software_stack(tmp_path):
    lines = [
        "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (8, 9, 2) but found runtime "
        "version (8, 5, 0). PyTorch already comes bundled with cuDNN.",
    ]
    assert verdict(tmp_path, lines) == ("framework.cuda_build_skew", "system_software", False, [])


def test_dataloader_receiving_no_file_descriptors_is_the_open_file_limit(tmp_path):
    assert verdict(tmp_path, ["RuntimeError: received 0 items of ancdata"]) == (
        "infra.too_many_open_files",
        "infrastructure",
        False,
        [],
    )


def test_a_dataset_the_hub_cannot_be_reached_for_is_the_clusters_way_out(tmp_path):
    lines = ["ConnectionError: Couldn't reach 'allenai/c4' on the Hub (ConnectionError)"]
    assert verdict(tmp_path, lines) == ("infra.external_endpoint_unreachable", "infrastructure", False, [])


def test_sruns_application_launch_failure_alone_is_the_launch(tmp_path):
    lines = ["srun: error: Application launch failed: Communication connection failure"]
    assert verdict(tmp_path, lines) == ("scheduler.srun_launch_failed", "infrastructure", False, [])
