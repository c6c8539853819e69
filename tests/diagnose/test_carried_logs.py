"""``sickbay diagnose`` on logs as operators gather them: across nodes with ``pdsh``, from
``kubectl logs --timestamps``, from a terminal with colours. The verdict is the one the bare log
gets, and pdsh's prefix names the node."""

from __future__ import annotations

from pathlib import Path

from streams.diagnose.driver import summary
from tests.diagnose.logs import diagnosed

KERNEL = [
    "[Sat Feb 13 22:40:01 2021] NVRM: GPU at PCI:0000:db:00: GPU-4a28de72-2645-de9a-eb35-a394cef3f4da",
    "[Sat Feb 13 22:40:04 2021] NVRM: Xid (PCI:0000:db:00): 79, pid=0, GPU has fallen off the bus.",
]
TRAINING = [
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "train.py", line 88, in <module>',
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.10 GiB",
    "E1129 11:56:57.204000 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 3",
    "    exitcode  : 1 (pid: 4242)",
]


def _verdict(tmp_path: Path, lines: list[str]) -> dict[str, object]:
    return summary(diagnosed(tmp_path, lines))


def test_a_pdsh_gathered_kernel_log_isolates_the_node_pdsh_names(tmp_path: Path):
    bare = _verdict(tmp_path, KERNEL)
    gathered = _verdict(
        tmp_path, [f"gpu17: {line}" for line in KERNEL] + ["gpu03: [Sat Feb 13 22:41:00 2021] ok"]
    )
    assert bare["category"] == gathered["category"] == "hardware_gpu"
    assert gathered["culprit"] == "gpu17 GPU 0000:db:00"
    assert gathered["isolate"] == ["gpu17"]


def test_kubectl_timestamps_and_colours_leave_the_verdict_as_it_was(tmp_path: Path):
    bare = _verdict(tmp_path, TRAINING)
    stamped = _verdict(tmp_path, [f"2024-11-29T11:56:57.{i:06d}Z {line}" for i, line in enumerate(TRAINING)])
    coloured = _verdict(
        tmp_path, [f"\x1b[31m{line}\x1b[0m" if "Error" in line else line for line in TRAINING]
    )
    keys = ("category", "restartable", "isolate")
    assert bare["category"] == "application"
    assert [stamped[k] for k in keys] == [bare[k] for k in keys] == [coloured[k] for k in keys]
    assert isinstance(coloured["root_cause"], dict)
    assert "\x1b" not in str(coloured["root_cause"]["text"])
