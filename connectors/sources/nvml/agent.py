"""The NVML node agent: GPU samples on ``raw.telemetry``, GPU faults as log lines on ``raw.logs``.

Every ``interval`` the agent reads each GPU (temperature, power, SM/memory
clocks, throttle reasons, ECC counters (volatile and aggregate, corrected and uncorrected),
remapped rows, NVLink error counters summed over links) into one
:class:`GpuTelemetry` named with DCGM field names, so NVML and dcgm-exporter
samples compare directly. Between samples it blocks on NVML's event set for Xid
critical errors. Faults leave as the text the kernel, DCGM or nvidia-smi write
for them, so the existing rules attribute them:

- an Xid event → ``NVRM: Xid (PCI:0000:3b:00): 79, ...`` (``gpu.xid``);
- more volatile double-bit errors, a row-remap failure or pending remap → the
  DCGM health messages (:mod:`connectors.sources.nvml.lines`);
- a GPU that stops answering (``NVML_ERROR_GPU_IS_LOST``) → nvidia-smi's
  ``Unable to determine the device handle for gpu …: GPU is lost`` (``gpu.nvml_lost_gpu``).

A field the GPU or driver does not support is skipped from then on and listed in
the coverage report, never guessed.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TypeVar

from connectors.sources.nvml.api import NvmlApi, NvmlError, NvmlGpuLost, NvmlNotSupported
from connectors.sources.nvml.lines import change_lines, kernel_pci, xid_line
from connectors.sources.polling import poll_loop
from schemas import codec
from schemas.base import utcnow
from schemas.collector import Reach
from schemas.raw import SickbayLineRecord
from schemas.telemetry import GpuTelemetry

log = logging.getLogger("sickbay.collect.nvml")

T = TypeVar("T")
MAX_PROBLEMS = 20
SOURCE = "nvml"
NVLINK_FIELDS = {
    "replay": "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "recovery": "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "crc_flit": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "crc_data": "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
}
_BUS = re.compile(r"^([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$")


class RecordSink(Protocol):
    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None: ...


def smi_bus_id(bus_id: str) -> str:
    """``00000000:3B:00.0`` → ``0000:3B:00.0``, as nvidia-smi prints it."""
    m = _BUS.match(bus_id)
    if m is None:
        return bus_id
    return f"{int(m.group(1), 16):04X}:{m.group(2).upper()}:{m.group(3).upper()}.{m.group(4)}"


@dataclass
class Device:
    index: int
    uuid: str | None
    pci_bus_id: str | None
    model: str | None
    lost: bool = False


@dataclass
class NvmlCoverage:
    node: str
    driver: str | None = None
    devices: int = 0
    xid_events: str = "not started"
    samples: int = 0
    xids: int = 0
    fault_lines: int = 0
    lost: list[int] = field(default_factory=list)
    nvlinks: dict[int, int] = field(default_factory=dict)  # GPU index → links NVML reports
    unsupported: dict[str, list[int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        log.warning("%s", text)
        self.problems = [*self.problems[-(MAX_PROBLEMS - 1) :], text]

    def reached(self, devices: list[Device]) -> list[Reach]:
        out = [
            Reach(
                kind="api",
                target="nvml",
                ok=self.devices > 0,
                state=f"driver {self.driver}; {self.devices} GPUs",
            ),
            Reach(
                kind="api",
                target="nvml xid events",
                ok=self.xid_events == "watching",
                state=self.xid_events.partition(": ")[0],
                detail=self.xid_events.partition(": ")[2] or None,
            ),
        ]
        for d in devices:
            missing = sorted(k for k, v in self.unsupported.items() if d.index in v)
            out.append(
                Reach(
                    kind="other",
                    target=f"GPU {d.index} {d.uuid or ''}".rstrip(),
                    ok=not d.lost,
                    state="lost" if d.lost else f"sampling; {self.nvlinks.get(d.index, 0)} NVLinks",
                    detail=f"not supported: {', '.join(missing)}" if missing else None,
                )
            )
        return out

    def counts(self) -> dict[str, int]:
        return {
            "samples": self.samples,
            "xids": self.xids,
            "fault_lines": self.fault_lines,
            "lost_gpus": len(self.lost),
            "problems": len(self.problems),
        }


class NvmlAgent:
    def __init__(
        self,
        sink: RecordSink,
        telemetry_topic: str,
        logs_topic: str,
        api: NvmlApi,
        *,
        node: str,
        cluster: str | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.sink = sink
        self.telemetry_topic = telemetry_topic
        self.logs_topic = logs_topic
        self.api = api
        self.node = node
        self.cluster = cluster
        self.clock = clock
        self.coverage = NvmlCoverage(node=node)
        self.devices: list[Device] = []
        self._last: dict[int, GpuTelemetry] = {}
        self._skip: set[tuple[str, int]] = set()
        self._nvlinks: dict[int, int] = {}

    def reached(self) -> list[Reach]:
        return self.coverage.reached(self.devices)

    # -- set-up ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Init NVML and find the GPUs; :class:`NvmlLibraryMissing` propagates (the CLI exits non-zero)."""
        self.api.init()
        try:
            self.coverage.driver = self.api.driver_version()
        except NvmlError as exc:
            self.coverage.problem(f"driver version: {exc}")
        count = self.api.device_count()
        for i in range(count):
            dev = Device(i, None, None, None)
            for attr, read in (
                ("uuid", self.api.uuid),
                ("pci_bus_id", self.api.pci_bus_id),
                ("model", self.api.name),
            ):
                try:
                    setattr(dev, attr, read(i))
                except NvmlGpuLost:
                    dev.lost = True
                except NvmlError as exc:
                    self.coverage.problem(f"GPU {i} {attr}: {exc}")
            self.devices.append(dev)
        self.coverage.devices = count
        try:
            self.api.watch_xids([d.index for d in self.devices if not d.lost])
            self.coverage.xid_events = "watching"
        except NvmlError as exc:  # e.g. not supported inside some containers: samples still flow
            self.coverage.xid_events = f"unavailable: {exc}"
            self.coverage.problem(f"Xid events: {exc}")
        for dev in self.devices:
            if dev.lost:
                self._gpu_lost(dev)

    # -- output ---------------------------------------------------------------------------------

    def _line(self, dev: Device, text: str, t: datetime) -> None:
        rec = SickbayLineRecord(line=text, host=self.node, file=f"{SOURCE}:{dev.uuid or dev.index}", time=t)
        self.sink.produce(self.logs_topic, codec.dumps(rec), key=self.node.encode())
        self.coverage.fault_lines += 1

    def _gpu_lost(self, dev: Device) -> None:
        if dev.index in self.coverage.lost:
            return
        self.coverage.lost.append(dev.index)
        dev.lost = True
        where = smi_bus_id(dev.pci_bus_id) if dev.pci_bus_id else f"index {dev.index}"
        text = (
            f"Unable to determine the device handle for gpu {where}: GPU is lost.  "
            "Reboot the system to recover this GPU"
        )
        self._line(dev, text, self.clock())

    # -- sampling -------------------------------------------------------------------------------

    def _read(self, name: str, dev: Device, fn: Callable[[], T]) -> T | None:
        if (name, dev.index) in self._skip:
            return None
        try:
            return fn()
        except NvmlNotSupported:
            self._skip.add((name, dev.index))
            self.coverage.unsupported.setdefault(name, []).append(dev.index)
        except NvmlGpuLost:
            raise
        except NvmlError as exc:
            self.coverage.problem(f"GPU {dev.index} {name}: {exc}")
        return None

    def _metrics(self, dev: Device) -> dict[str, float]:
        i, api = dev.index, self.api
        m: dict[str, float] = {}

        def put(key: str, value: float | None) -> None:
            if value is not None:
                m[key] = float(value)

        put("DCGM_FI_DEV_GPU_TEMP", self._read("temperature", dev, lambda: api.temperature_c(i)))
        power = self._read("power", dev, lambda: api.power_mw(i))
        put("DCGM_FI_DEV_POWER_USAGE", power / 1000.0 if power is not None else None)
        put("DCGM_FI_DEV_SM_CLOCK", self._read("sm_clock", dev, lambda: api.clock_mhz(i, "sm")))
        put("DCGM_FI_DEV_MEM_CLOCK", self._read("mem_clock", dev, lambda: api.clock_mhz(i, "mem")))
        put(
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
            self._read("throttle_reasons", dev, lambda: api.throttle_reasons(i)),
        )
        for key, err, ctr in (
            ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "corrected", "volatile"),
            ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "uncorrected", "volatile"),
            ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "corrected", "aggregate"),
            ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "uncorrected", "aggregate"),
        ):
            put(key, self._read(f"ecc_{err}_{ctr}", dev, lambda e=err, c=ctr: api.ecc_errors(i, e, c)))  # type: ignore[misc]
        rows = self._read("remapped_rows", dev, lambda: api.remapped_rows(i))
        if rows is not None:
            put("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", rows.corrected)
            put("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", rows.uncorrected)
            put("DCGM_FI_DEV_ROW_REMAP_PENDING", int(rows.pending))
            put("DCGM_FI_DEV_ROW_REMAP_FAILURE", int(rows.failure))
        if i not in self._nvlinks:
            self._nvlinks[i] = self._read("nvlink", dev, lambda: api.nvlink_count(i)) or 0
            self.coverage.nvlinks[i] = self._nvlinks[i]
        for ctr, key in NVLINK_FIELDS.items():
            total: int | None = None
            for link in range(self._nvlinks[i]):
                got = self._read(f"nvlink_{ctr}", dev, lambda ln=link, c=ctr: api.nvlink_errors(i, ln, c))  # type: ignore[misc]
                if got is not None:
                    total = (total or 0) + got
            put(key, total)
        return m

    def sample_once(self) -> int:
        """One GpuTelemetry per answering GPU; returns how many were produced."""
        t = self.clock()
        n = 0
        for dev in self.devices:
            if dev.lost:
                continue
            try:
                metrics = self._metrics(dev)
            except NvmlGpuLost:
                self._gpu_lost(dev)
                continue
            rec = GpuTelemetry(
                time=t,
                node=self.node,
                gpu=dev.index,
                uuid=dev.uuid,
                pci_bus_id=dev.pci_bus_id,
                model=dev.model,
                driver=self.coverage.driver,
                cluster=self.cluster,
                source=SOURCE,
                metrics=metrics,
            )
            self.sink.produce(self.telemetry_topic, codec.dumps(rec), key=self.node.encode())
            for text in change_lines(self._last.get(dev.index), rec, with_xid=False):
                self._line(dev, text, t)
            self._last[dev.index] = rec
            self.coverage.samples += 1
            n += 1
        return n

    def wait_events(self, timeout_ms: int) -> int:
        """Block up to ``timeout_ms`` for the first Xid, then take what else is queued; returns how many."""
        n = 0
        wait = timeout_ms
        while True:
            try:
                ev = self.api.wait_xid(wait)
            except NvmlError as exc:
                self.coverage.problem(f"Xid event wait: {exc}")
                return n
            if ev is None:
                return n
            dev = next((d for d in self.devices if d.index == ev.index), Device(ev.index, None, None, None))
            text = xid_line(
                kernel_pci(dev.pci_bus_id),
                ev.index,
                ev.code,
                "reported by NVML (nvmlEventTypeXidCriticalError)",
            )
            self._line(dev, text, self.clock())
            self.coverage.xids += 1
            n += 1
            wait = 0

    def run(
        self,
        interval_s: float,
        stop: Callable[[], bool],
        *,
        on_tick: Callable[[], None] | None = None,
        stop_after_s: float | None = None,
    ) -> None:
        def take_events(left: float) -> None:
            self.wait_events(int(min(left, 0.5) * 1000))  # short waits: SIGTERM is seen within 0.5 s
            if on_tick is not None:
                on_tick()

        def nap(left: float) -> None:
            time.sleep(min(left, 0.2))

        watching = self.coverage.xid_events == "watching"
        poll_loop(
            self.sample_once,
            interval_s,
            stop,
            on_tick=on_tick,
            stop_after_s=stop_after_s,
            wait=take_events if watching else nap,
        )

    def close(self) -> None:
        try:
            self.api.shutdown()
        except NvmlError as exc:
            self.coverage.problem(f"shutdown: {exc}")
