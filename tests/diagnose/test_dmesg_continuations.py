"""``sickbay diagnose`` reads a kernel message that dmesg printed over several lines as one: the
classic "fallen off the bus" block names its GPU only on its first line (nvsentinel#155 in the
given set)."""

from __future__ import annotations

from pathlib import Path

from streams.diagnose.driver import summary
from tests.diagnose.logs import diagnosed

BLOCK = [
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
    "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
    "               NVRM: fallen off the bus and is not responding to commands.",
    "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).",
]


def _diagnose(
    tmp_path: Path, lines: list[str]
) -> tuple[dict[str, object], list[tuple[str, str | None, int | None]]]:
    d = diagnosed(tmp_path, lines, "dmesg.txt")
    return summary(d), [(s.rule, s.gpu, s.source.line) for s in d.signals]


def test_the_three_line_fallen_off_the_bus_block_names_its_gpu(tmp_path: Path):
    verdict, signals = _diagnose(tmp_path, BLOCK)
    assert verdict["category"] == "hardware_gpu"
    assert verdict["culprit"] == "GPU 0000:b3:00.0"
    # one signal, the last line's (where the words are), now with the first line's GPU
    assert [s for s in signals if s[0] == "gpu.fallen_off_bus"] == [("gpu.fallen_off_bus", "0000:b3:00.0", 3)]


def test_a_line_indented_to_another_width_is_a_line_of_its_own(tmp_path: Path):
    lines = [
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "      NVRM: fallen off the bus and is not responding to commands.",
    ]
    _, signals = _diagnose(tmp_path, lines)
    assert [s for s in signals if s[0] == "gpu.fallen_off_bus"] == [("gpu.fallen_off_bus", None, 2)]


def test_continuation_lines_without_a_rule_literal_change_nothing(tmp_path: Path):
    lines = [
        "[   12.000001] Call Trace:",
        "               <TASK>",
        "               dump_stack_lvl+0x4a/0x80",
        "[   12.000100] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.",
    ]
    verdict, signals = _diagnose(tmp_path, lines)
    assert [s[0] for s in signals] == ["gpu.xid"]
    assert verdict["culprit"] == "GPU 0000:3b:00"
