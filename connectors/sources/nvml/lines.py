"""Log lines for GPU fault changes seen in telemetry, in the words the rule catalog already reads.

A counter that moved between two samples (DCGM's last-Xid field, the volatile
double-bit ECC total, the row-remap flags) becomes the line the kernel or DCGM
writes for that fault, so ``gpu.xid``, ``gpu.ecc_dbe`` and ``gpu.row_remap_*``
attribute it with no new rule. The NVML agent and the dcgm-exporter scraper
share this, so one fault reads the same from either source. The first sample of
a GPU only sets the baseline: the last-Xid field keeps an old Xid for ever, and a
collector restart must not replay it as a new fault.
"""

from __future__ import annotations

import re

from schemas.telemetry import GpuTelemetry

XID = "DCGM_FI_DEV_XID_ERRORS"
ECC_DBE_VOL = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
ROW_REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"

_BUS_ID = re.compile(r"^(?:([0-9A-Fa-f]{4,8}):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?$")


def kernel_pci(bus_id: str | None) -> str | None:
    """``00000000:3B:00.0`` (NVML / DCGM) → ``0000:3b:00``, the form in the kernel's ``NVRM: Xid`` line."""
    if not bus_id:
        return None
    m = _BUS_ID.match(bus_id.strip())
    if m is None:
        return None
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}"


def xid_line(pci: str | None, gpu: int | None, code: int, detail: str) -> str:
    """The kernel's line; without a bus id the GPU index stands in (the rule needs a PCI-shaped id)."""
    where = pci or f"0000:{(gpu or 0):02x}:00"
    return f"NVRM: Xid (PCI:{where}): {code}, {detail}"


def _rose(prev: GpuTelemetry, cur: GpuTelemetry, name: str) -> float | None:
    a, b = prev.metrics.get(name), cur.metrics.get(name)
    if a is None or b is None or b <= a:
        return None
    return b - a


def change_lines(prev: GpuTelemetry | None, cur: GpuTelemetry, *, with_xid: bool = True) -> list[str]:
    """Lines for what got worse from ``prev`` to ``cur`` (same node and GPU); none on the first sample."""
    if prev is None:
        return []
    out: list[str] = []
    gpu = cur.gpu if cur.gpu is not None else 0
    if with_xid:
        old, new = prev.metrics.get(XID), cur.metrics.get(XID)
        if new is not None and new > 0 and new != old:
            out.append(
                xid_line(kernel_pci(cur.pci_bus_id), cur.gpu, int(new), f"reported by {cur.source} ({XID})")
            )
    dbe = _rose(prev, cur, ECC_DBE_VOL)
    if dbe is not None:
        out.append(f"Detected {int(dbe)} volatile double-bit ECC error(s) in GPU {gpu}.")
    if _rose(prev, cur, ROW_REMAP_FAILURE) is not None:
        out.append(f"GPU {gpu} had uncorrectable memory errors and row remapping failed.")
    if _rose(prev, cur, ROW_REMAP_PENDING) is not None:
        out.append(f"GPU {gpu} had memory errors and row remappings are pending")
    return out
