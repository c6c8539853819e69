"""A log that names its host once, in a shell prompt or a report's header, gets that host for the
lines after it that name none: the verdict names a culprit an operator can drain. Shapes from real
threads: ``[root@node045 ~]# ibstatus`` (a cluster admin's paste), ``Node:  c016`` (a node-down
report), ``scontrol show node``'s ``NodeName=``."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.diagnose.context_hosts import ContextHosts
from streams.diagnose.driver import summary
from tests.diagnose.logs import diagnosed

XID79 = "[ 5321.108101] NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus."


def _hosts(text: str) -> list[str | None]:
    """The host in context at each line of ``text`` (numbered from 1, as the reader does)."""
    ctx = ContextHosts()
    data = text.encode()
    ctx.scan("f", 1, data)
    return [ctx.host_at("f", n) for n in range(1, data.count(b"\n") + 2)]


@pytest.mark.parametrize(
    ("prompt", "host"),
    [
        ("[root@node045 ~]# dmesg -T", "node045"),  # Red Hat's bash
        ("alice@gpu-07:~/run$ python train.py", "gpu-07"),  # Debian's
        ("root@dgx-a100-017:/workspace# nvidia-smi -q", "dgx-a100-017"),
        ("(base) bob@DeepWhite ~ % python -m torch.distributed.run --nproc_per_node 4 t.py", "DeepWhite"),
        ("[alice@cn119 logs]$ sudo dmesg", "cn119"),  # sudo runs it here
        ("Node:  c016", "c016"),  # a node-down report's header
        ("NodeName=gpu-12 Arch=x86_64 CoresPerSocket=32", "gpu-12"),  # scontrol show node
        ("Hostname: ip-10-4-164-212", "ip-10-4-164-212"),
        (
            "Linux gpu-07 5.15.0-91-generic #101-Ubuntu SMP Tue Nov 14 UTC 2023 x86_64 x86_64 GNU/Linux",
            "gpu-07",
        ),
        ("Linux itscrd-v100.cern.ch x86_64", "itscrd-v100.cern.ch"),  # uname -nm
    ],
)
def test_a_prompt_or_a_node_header_puts_its_host_in_context(prompt, host):
    assert _hosts(f"{prompt}\n{XID79}") == [host, host]


@pytest.mark.parametrize(
    "prompt",
    [
        "[alice@login01 ~]$ srun -N2 --gpus-per-node=8 python train.py",  # output from other nodes
        "alice@login01:~$ ssh gpu-07 dmesg",
        "[root@cl3-ac-us-hgx1 ~]# kubectl logs nvidia-cuda-validator-vkfv6 -n gpu-operator",  # a pod's
        "alice@login01:~$ sudo scontrol show node gpu-07",
        "root@localhost:~# dmesg",
        "***@***.*** ~]# ps -aux | grep 1395",  # a host GitHub hid
    ],
)
def test_a_prompt_that_runs_elsewhere_or_hides_its_host_names_nothing(prompt):
    assert _hosts(f"{prompt}\n{XID79}") == [None, None]


def test_a_later_prompt_ends_an_earlier_ones_context():
    text = "\n".join(
        [
            "[root@gpu-01 ~]# dmesg",
            XID79,
            "[alice@login01 ~]$ srun -N2 python train.py",
            XID79,
            "[root@gpu-02 ~]# dmesg",
            XID79,
        ]
    )
    assert _hosts(text) == ["gpu-01", "gpu-01", None, None, "gpu-02", "gpu-02"]


@pytest.mark.parametrize(
    "line",
    [
        "    @torch.no_grad()",  # a decorator
        "mail alice@example.com: the job is done",  # an address, not a prompt
        "INFO: node gpu-07 is up",  # a node named in prose, not a header
        '  File "/usr/lib/python3/hostname.py", line 3',
        "hostname_resolution = true",
        "Node: 0",  # a NUMA node
        "[    0.000000] Linux version 5.15.0-91-generic (buildd@lcy02-amd64-045) (x86_64-linux-gnu-gcc)",
        "Linux version 5.4.0 x86_64",  # the kernel's banner names no host
        "Linux is the kernel on gpu-07 x86_64",  # prose
    ],
)
def test_lines_that_only_mention_a_host_are_no_context(line):
    assert _hosts(f"{line}\n{XID79}") == [None, None]


def test_a_host_named_only_after_the_line_names_nothing_before_it():
    assert _hosts(f"{XID79}\nNode: c016") == [None, "c016"]


def test_context_carries_across_the_readers_chunks():
    ctx = ContextHosts()
    ctx.scan("f", 1, b"[root@node045 ~]# dmesg\nline two\n")
    ctx.scan("f", 3, b"line three\n" + XID79.encode())
    ctx.scan("g", 1, XID79.encode())
    assert (ctx.host_at("f", 4), ctx.host_at("g", 1)) == ("node045", None)


def _diagnose(tmp_path: Path, text: str) -> dict[str, object]:
    return summary(diagnosed(tmp_path, text.splitlines(), "paste.log"))


def test_a_pasted_dmesg_after_its_prompt_names_the_host_and_the_gpu(tmp_path):
    out = _diagnose(tmp_path, f"[root@dgx-a100-017 ~]# dmesg -T | grep -i xid\n{XID79}")
    assert (out["category"], out["culprit"], out["isolate"]) == (
        "hardware_gpu",
        "dgx-a100-017 GPU 0000:06:00",
        ["dgx-a100-017"],
    )


def test_a_paste_from_a_login_node_leaves_the_culprit_to_the_lines(tmp_path):
    out = _diagnose(tmp_path, f"[alice@login01 ~]$ srun -N4 python train.py\n{XID79}")
    assert out["category"] == "hardware_gpu"
    assert out["culprit"] == "GPU 0000:06:00"  # not login01: the Xid came from one of the four nodes
    assert "login01" not in str(out["isolate"])
