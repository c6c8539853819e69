"""A link fault isolates only what its own kernel reported (streams/correlate/attribution.py
``_isolate``). A pasted kernel log often carries no hostname; its NVLink Xid still names the GPU
that reported it, so that GPU is what to take out. A peer's NCCL complaint names neither end."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from streams.diagnose.driver import Diagnoser, summary

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _summary(tmp_path: Path, text: str) -> dict[str, object]:
    path = tmp_path / "pasted.log"
    path.write_text(text)
    return summary(Diagnoser().run([str(path)], NOW))


def test_an_nvlink_xid_in_a_kernel_log_without_a_host_isolates_its_gpu(tmp_path: Path):
    # open-gpu-kernel-modules#1150, as posted: Xid 45s naming the NVLink5 Xid 149 before them.
    s = _summary(
        tmp_path,
        "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149\n"
        "kernel: NVRM: Xid (PCI:0000:ed:00): 45, pid=1818992, name=python3, Ch 0000000c caused by previous Xid 145\n",
    )
    assert (s["category"], s["restartable"], s["isolate"]) == ("hardware_gpu", True, ["gpu:0000:dc:00"])


def test_a_peers_ib_completion_error_isolates_nothing(tmp_path: Path):
    s = _summary(
        tmp_path,
        "node-2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer "
        "10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)\n",
    )
    assert s["category"] == "hardware_network"
    assert s["isolate"] == []
