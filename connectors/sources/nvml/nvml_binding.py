"""The one module that calls pynvml (nvidia-ml-py): :class:`PynvmlApi` implements :class:`NvmlApi`.

Kept thin on purpose: each method is one NVML call plus the translation of
NVML's error classes into ours (not supported, GPU lost, library missing).
Everything with logic lives in :mod:`connectors.sources.nvml.agent` and is tested
through a fake; this file is exercised only on a host with a driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from connectors.sources.nvml.api import (
    EccCounter,
    EccError,
    NvLinkCounter,
    NvmlError,
    NvmlGpuLost,
    NvmlLibraryMissing,
    NvmlNotSupported,
    RemappedRows,
    XidEvent,
)

T = TypeVar("T")


def _load() -> Any:
    try:
        import pynvml  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as exc:
        raise NvmlLibraryMissing(
            "nvidia-ml-py is not installed: pip install 'sickbay[nvml]' (or nvidia-ml-py>=12.535)"
        ) from exc
    return pynvml


class PynvmlApi:
    """Real NVML. ``init`` raises :class:`NvmlLibraryMissing` when libnvidia-ml.so.1 is absent."""

    def __init__(self) -> None:
        self._nv = _load()
        self._handles: dict[int, Any] = {}
        self._events: Any = None

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        nv = self._nv
        try:
            return fn(*args)
        except nv.NVMLError_NotSupported as exc:
            raise NvmlNotSupported(str(exc), nv.NVML_ERROR_NOT_SUPPORTED) from exc
        except nv.NVMLError_GpuIsLost as exc:
            raise NvmlGpuLost(str(exc), nv.NVML_ERROR_GPU_IS_LOST) from exc
        except nv.NVMLError_LibraryNotFound as exc:
            raise NvmlLibraryMissing(
                f"libnvidia-ml.so.1 cannot be loaded ({exc}): no NVIDIA driver on this host?"
            ) from exc
        except nv.NVMLError as exc:
            raise NvmlError(str(exc), getattr(exc, "value", None)) from exc

    def _h(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._call(self._nv.nvmlDeviceGetHandleByIndex, index)
        return self._handles[index]

    def init(self) -> None:
        self._call(self._nv.nvmlInit)

    def shutdown(self) -> None:
        if self._events is not None:
            self._call(self._nv.nvmlEventSetFree, self._events)
            self._events = None
        self._call(self._nv.nvmlShutdown)

    def driver_version(self) -> str:
        return str(self._call(self._nv.nvmlSystemGetDriverVersion))

    def device_count(self) -> int:
        return int(self._call(self._nv.nvmlDeviceGetCount))

    def uuid(self, index: int) -> str:
        return str(self._call(self._nv.nvmlDeviceGetUUID, self._h(index)))

    def pci_bus_id(self, index: int) -> str:
        info = self._call(self._nv.nvmlDeviceGetPciInfo, self._h(index))
        bus = info.busId
        return bus.decode() if isinstance(bus, bytes) else str(bus)

    def name(self, index: int) -> str:
        return str(self._call(self._nv.nvmlDeviceGetName, self._h(index)))

    def temperature_c(self, index: int) -> int:
        return int(
            self._call(self._nv.nvmlDeviceGetTemperature, self._h(index), self._nv.NVML_TEMPERATURE_GPU)
        )

    def power_mw(self, index: int) -> int:
        return int(self._call(self._nv.nvmlDeviceGetPowerUsage, self._h(index)))

    def clock_mhz(self, index: int, clock: Literal["sm", "mem"]) -> int:
        kind = self._nv.NVML_CLOCK_SM if clock == "sm" else self._nv.NVML_CLOCK_MEM
        return int(self._call(self._nv.nvmlDeviceGetClockInfo, self._h(index), kind))

    def throttle_reasons(self, index: int) -> int:
        return int(self._call(self._nv.nvmlDeviceGetCurrentClocksThrottleReasons, self._h(index)))

    def ecc_errors(self, index: int, error: EccError, counter: EccCounter) -> int:
        nv = self._nv
        etype = (
            nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
            if error == "corrected"
            else nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        )
        ctype = nv.NVML_VOLATILE_ECC if counter == "volatile" else nv.NVML_AGGREGATE_ECC
        return int(self._call(nv.nvmlDeviceGetTotalEccErrors, self._h(index), etype, ctype))

    def remapped_rows(self, index: int) -> RemappedRows:
        corr, unc, pending, failure = self._call(self._nv.nvmlDeviceGetRemappedRows, self._h(index))
        return RemappedRows(int(corr), int(unc), bool(pending), bool(failure))

    def nvlink_count(self, index: int) -> int:
        """Links that report a state (``nvmlDeviceGetNvLinkState``) out of NVML's maximum."""
        n = 0
        for link in range(self._nv.NVML_NVLINK_MAX_LINKS):
            try:
                self._call(self._nv.nvmlDeviceGetNvLinkState, self._h(index), link)
            except NvmlError:
                break
            n += 1
        return n

    def nvlink_errors(self, index: int, link: int, counter: NvLinkCounter) -> int:
        nv = self._nv
        kind = {
            "replay": nv.NVML_NVLINK_ERROR_DL_REPLAY,
            "recovery": nv.NVML_NVLINK_ERROR_DL_RECOVERY,
            "crc_flit": nv.NVML_NVLINK_ERROR_DL_CRC_FLIT,
            "crc_data": nv.NVML_NVLINK_ERROR_DL_CRC_DATA,
        }[counter]
        return int(self._call(nv.nvmlDeviceGetNvLinkErrorCounter, self._h(index), link, kind))

    def watch_xids(self, indices: list[int]) -> None:
        nv = self._nv
        self._events = self._call(nv.nvmlEventSetCreate)
        for i in indices:
            self._call(
                nv.nvmlDeviceRegisterEvents, self._h(i), nv.nvmlEventTypeXidCriticalError, self._events
            )

    def wait_xid(self, timeout_ms: int) -> XidEvent | None:
        nv = self._nv
        if self._events is None:
            return None
        try:
            data = self._call(nv.nvmlEventSetWait, self._events, timeout_ms)
        except NvmlError as exc:
            if exc.code == nv.NVML_ERROR_TIMEOUT:
                return None
            raise
        if data.eventType != nv.nvmlEventTypeXidCriticalError:
            return None
        index = int(self._call(nv.nvmlDeviceGetIndex, data.device))
        return XidEvent(index=index, code=int(data.eventData))
