"""The NVML surface the agent uses, as a Protocol: what a fake must provide and the binding implements.

Devices are addressed by index. Every read may raise :class:`NvmlNotSupported`
(that field does not exist on this GPU or driver: skipped, counted once) or
:class:`NvmlGpuLost` (the GPU stopped answering: a fault in itself); any other
:class:`NvmlError` is reported and the field skipped for that sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

EccError = Literal["corrected", "uncorrected"]
EccCounter = Literal["volatile", "aggregate"]
NvLinkCounter = Literal["replay", "recovery", "crc_flit", "crc_data"]


class NvmlError(RuntimeError):
    """An NVML call failed; ``code`` is NVML's return code when known."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class NvmlNotSupported(NvmlError):
    pass


class NvmlGpuLost(NvmlError):
    pass


class NvmlLibraryMissing(NvmlError):
    """nvidia-ml-py is not installed or libnvidia-ml.so.1 cannot be loaded (no driver on this host)."""


@dataclass(frozen=True)
class RemappedRows:
    corrected: int
    uncorrected: int
    pending: bool
    failure: bool


@dataclass(frozen=True)
class XidEvent:
    index: int  # device index
    code: int


class NvmlApi(Protocol):
    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str: ...
    def device_count(self) -> int: ...
    def uuid(self, index: int) -> str: ...
    def pci_bus_id(self, index: int) -> str: ...
    def name(self, index: int) -> str: ...
    def temperature_c(self, index: int) -> int: ...
    def power_mw(self, index: int) -> int: ...
    def clock_mhz(self, index: int, clock: Literal["sm", "mem"]) -> int: ...
    def throttle_reasons(self, index: int) -> int: ...
    def ecc_errors(self, index: int, error: EccError, counter: EccCounter) -> int: ...
    def remapped_rows(self, index: int) -> RemappedRows: ...
    def nvlink_count(self, index: int) -> int: ...
    def nvlink_errors(self, index: int, link: int, counter: NvLinkCounter) -> int: ...
    def watch_xids(self, indices: list[int]) -> None:
        """Register every device for ``nvmlEventTypeXidCriticalError`` on one event set."""
        ...

    def wait_xid(self, timeout_ms: int) -> XidEvent | None:
        """``nvmlEventSetWait``: the next Xid, or None when ``timeout_ms`` passed without one."""
        ...
