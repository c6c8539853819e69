"""Slurm name grammar: what reaches scontrol, ssh or a slurmrestd URL is checked first."""

from __future__ import annotations

import pytest

from connectors.actuators import slurm_names
from connectors.actuators.slurm_names import InvalidName


@pytest.mark.parametrize("name", ["gpu-01", "node7", "dgx_a100.rack3", "n0"])
def test_plain_node_names_are_accepted(name):
    assert slurm_names.node_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "-h",
        "--help",
        "gpu-01 State=RESUME",
        "gpu-01;id",
        "$(id)",
        "gpu/01",
        "../nodes",
        "gpu-[01-02]",
        "é1",
    ],
)
def test_option_like_shell_like_and_multi_word_node_names_are_rejected(name):
    with pytest.raises(InvalidName, match="invalid Slurm node name"):
        slurm_names.node_name(name)


def test_hostlists_expand_to_checked_sorted_unique_nodes():
    assert slurm_names.node_names(["gpu-[01-03]", "gpu-02", "cpu-7"]) == [
        "cpu-7",
        "gpu-01",
        "gpu-02",
        "gpu-03",
    ]


@pytest.mark.parametrize("expr", ["gpu-[01-", "gpu-[a-c]", "-gpu[1-2]", "gpu-[1-2] x", "gpu;[1-2]"])
def test_malformed_hostlists_are_rejected(expr):
    with pytest.raises(InvalidName, match="hostlist"):
        slurm_names.node_names([expr])


def test_a_hostlist_naming_too_many_nodes_is_rejected():
    with pytest.raises(InvalidName, match="more than"):
        slurm_names.node_names(["n[0-99999]"])


@pytest.mark.parametrize("job", ["4711", "4711_3", "4711+0", "1"])
def test_plain_array_task_and_het_component_job_ids_are_accepted(job):
    assert slurm_names.job_id(job) == job


@pytest.mark.parametrize(
    "job", ["", "-1", "4711_[1-3]", "4711 4712", "abc", "4711;id", "12345678901", "4711+"]
)
def test_other_job_ids_are_rejected(job):
    with pytest.raises(InvalidName, match="invalid Slurm job id"):
        slurm_names.job_id(job)


@pytest.mark.parametrize("reason", ["", "   ", "line\nbreak", "nul\x00byte", "esc\x1b[31m"])
def test_empty_reasons_and_control_characters_are_rejected(reason):
    with pytest.raises(InvalidName):
        slurm_names.reason(reason)


def test_a_reason_with_shell_metacharacters_is_plain_text_and_accepted():
    text = "sickbay: x; touch /tmp/pwned $(id) `id` 'q' \"dq\""
    assert slurm_names.reason(text) == text
