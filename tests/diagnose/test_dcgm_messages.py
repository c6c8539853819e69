"""DCGM's own failure messages (NVIDIA/DCGM dcgmlib/dcgm_errors.h), rendered as `dcgmi diag`,
`dcgmi health` and the tools built on them print them, read against the catalog.

DCGM rates each message with a severity (dcgm_errors.c): ISOLATE or RESET for a part that is broken,
MONITOR or TRIAGE for wear and configuration. A broken part is a root that drains its GPU or node;
wear is a hint that node health weighs. Before this audit the diagnostic's memory, L1-cache and
peer-to-peer findings, the uncontained-error message and the PCIe replay, link-rate, missing-NVLink
and NVSwitch non-fatal messages gave no signal at all.
"""

from __future__ import annotations

import pytest

from schemas import codec
from schemas.signals import Role
from tests.diagnose.logs import verdict
from tests.factories import signals

BROKEN = [  # DCGM severity ISOLATE or RESET, hardware category
    ("DCGM_FR_FAULTY_MEMORY", "Found 4 faulty memory elements on GPU 3", "gpu.dcgm_memory_fault"),
    (
        "DCGM_FR_MEMORY_MISMATCH",
        "A memory mismatch was detected on GPU 3, but no error was reported by CUDA or NVML.",
        "gpu.dcgm_memory_fault",
    ),
    ("DCGM_FR_NAN_VALUE", "Found 3 NaN-value memory elements on GPU 3", "gpu.dcgm_memory_fault"),
    (
        "DCGM_FR_L1TAG_MISCOMPARE",
        "Detected a miscompare failure in the L1 cache.",
        "gpu.dcgm_l1_cache_miscompare",
    ),
    (
        "DCGM_FR_BROKEN_P2P_MEMORY_DEVICE",
        "GPU 3 was unsuccessfully written to in a peer-to-peer test: memory",
        "gpu.dcgm_p2p_broken",
    ),
    (
        "DCGM_FR_BROKEN_P2P_WRITER_DEVICE",
        "GPU 3 unsuccessfully wrote data in a peer-to-peer test: memory",
        "gpu.dcgm_p2p_broken",
    ),
    ("DCGM_FR_UNCONTAINED_ERROR", "GPU had an uncontained error (XID 95)", "gpu.dcgm_uncontained"),
    ("DCGM_FR_VOLATILE_DBE_DETECTED", "Detected 2 volatile double-bit ECC error(s) in GPU 3.", "gpu.ecc_dbe"),
    (
        "DCGM_FR_ROW_REMAP_FAILURE",
        "GPU 3 had uncorrectable memory errors and row remapping failed.",
        "gpu.row_remap_failure",
    ),
    ("DCGM_FR_NVLINK_DOWN", "GPU 3's NvLink link 5 is currently down", "gpu.nvlink_down"),
    ("DCGM_FR_NVSWITCH_FATAL_ERROR", "Detected fatal errors on NvSwitch 2 link 17", "gpu.nvswitch_fatal"),
    ("DCGM_FR_XID_ERROR", "Detected XID 79 for GPU 3", "gpu.dcgm_xid"),
]

WEAR = [  # what node health weighs; never a job's root by itself
    (
        "DCGM_FR_PCI_REPLAY_RATE",
        "Detected more than 8 PCIe replays per minute for GPU 3 : 12",
        "gpu.pcie_replays",
    ),
    (
        "DCGM_FR_PCIE_H_REPLAY_VIOLATION",
        "GPU 3 host-side PCIe replay violation, see dmesg for more information",
        "gpu.pcie_replays",
    ),
    (
        "DCGM_FR_PCIE_WIDTH",
        "GPU 3 is running at PCI link width 8X, which is below the minimum allowed link generation of 16 "
        "(parameter 'pcie.min_pci_width')",
        "gpu.pcie_link_degraded",
    ),
    (
        "DCGM_FR_GPU_EXPECTED_NVLINKS_UP",
        "Only 16 NvLinks are up out of the expected 18",
        "gpu.nvlinks_missing",
    ),
    (
        "DCGM_FR_NVSWITCH_EXPECTED_NVLINKS_UP",
        "NvSwitch 2 - Only 60 NvLinks are up out of the expected 64",
        "gpu.nvlinks_missing",
    ),
    (
        "DCGM_FR_NVSWITCH_NON_FATAL_ERROR",
        "Detected nonfatal errors on NvSwitch 2 link 17",
        "gpu.dcgm_nvswitch_nonfatal",
    ),
    (
        "DCGM_FR_CLOCKS_EVENT_VIOLATION",
        "Clocks are being throttled for GPU 3 because of clock throttling starting 4.0 seconds into the test. "
        "HW Slowdown is engaged",
        "gpu.clocks_throttled",
    ),
    (
        "DCGM_FR_VOLATILE_SBE_DETECTED",
        "More than 10 single-bit ECC error(s) detected in GPU 3 Volatile SBEs: 14",
        "gpu.ecc_sbe",
    ),
    (
        "DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD",
        "150.0 CRC Data NvLink errors found occuring per second on GPU 3, exceeding the limit of 100 per second.",
        "gpu.nvlink_errors",
    ),
]


def _signals(line: str) -> list[tuple[str, Role]]:
    return [(s.rule, s.role) for s in signals(codec.dumps({"log": line, "host": "gpu-node-17"}))]


@pytest.mark.parametrize(("code", "line", "rule"), BROKEN, ids=[c for c, _, _ in BROKEN])
def test_a_part_dcgm_rates_isolate_is_the_gpus_fault_and_drains_it(tmp_path, code, line, rule):
    got_rule, category, restartable, isolate = verdict(
        tmp_path, [f"Dec 05 10:11:12 gpu-node-17 nv-hostengine[2211]: {line}"]
    )
    assert (got_rule, category, restartable) == (rule, "hardware_gpu", True)
    assert isolate in (["gpu-node-17"], ["gpu-node-17:3"])  # the GPU where the message names it


@pytest.mark.parametrize(("code", "line", "rule"), WEAR, ids=[c for c, _, _ in WEAR])
def test_wear_dcgm_reports_is_a_hint_for_node_health_not_a_verdict(tmp_path, code, line, rule):
    assert _signals(line) == [(rule, Role.HINT)]
    assert verdict(tmp_path, [line])[0] is None


def test_the_diagnostics_memory_finding_outranks_the_collectives_it_broke(tmp_path):
    lines = [
        "[rank5]:[E1205 10:11:12.123456 4411 ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=9121, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600003 milliseconds before timing out.",
        "Dec 05 10:11:12 gpu-node-17 nv-hostengine[2211]: Found 4 faulty memory elements on GPU 3",
    ]
    rule, category, restartable, isolate = verdict(tmp_path, lines)
    assert (rule, category, restartable, isolate) == (
        "gpu.dcgm_memory_fault",
        "hardware_gpu",
        True,
        ["gpu-node-17:3"],
    )


def test_a_passing_count_of_zero_is_not_a_memory_fault():
    assert _signals("Found 0 faulty memory elements on GPU 3") == []
