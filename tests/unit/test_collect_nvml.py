"""The NVML node agent through a fake NVML layer (no GPU on this host); the binding's missing-library
path is exercised for real by the CLI test at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import deque
from datetime import UTC, datetime
from typing import Any, Literal

from connectors.sources.nvml.agent import NvmlAgent, smi_bus_id
from connectors.sources.nvml.api import (
    EccCounter,
    EccError,
    NvLinkCounter,
    NvmlError,
    NvmlGpuLost,
    NvmlNotSupported,
    RemappedRows,
    XidEvent,
)
from schemas.telemetry import GpuTelemetry
from streams.extract.extractor import Extractor
from streams.extract.normalize import normalize
from streams.settings import REPO_ROOT
from tests.factories import ListSink

NOW = datetime(2026, 11, 29, 21, 0, tzinfo=UTC)


class FakeGpu:
    def __init__(self, index: int, bus: str) -> None:
        self.index = index
        self.uuid = f"GPU-00000000-0000-0000-0000-00000000000{index}"
        self.bus = bus
        self.temp = 40 + index
        self.power_mw = 312_457
        self.sm, self.mem = 1980, 2619
        self.throttle = 0
        self.ecc: dict[tuple[str, str], int] = {}
        self.rows = RemappedRows(0, 0, False, False)
        self.links = 18
        self.link_errors: dict[tuple[int, str], int] = {}
        self.lost = False
        self.unsupported: set[str] = set()


class FakeNvml:
    """Implements connectors.sources.nvml.api.NvmlApi over in-memory GPUs."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.events: deque[XidEvent] = deque()
        self.watched: list[int] | None = None
        self.watch_error: NvmlError | None = None
        self.calls = 0
        self.waits: list[int] = []
        self.shut = False

    def _g(self, i: int, what: str) -> FakeGpu:
        self.calls += 1
        g = self.gpus[i]
        if g.lost:
            raise NvmlGpuLost("GPU is lost", 15)
        if what in g.unsupported:
            raise NvmlNotSupported("Not Supported", 3)
        return g

    def init(self) -> None:
        pass

    def shutdown(self) -> None:
        self.shut = True

    def driver_version(self) -> str:
        return "550.54.15"

    def device_count(self) -> int:
        return len(self.gpus)

    def uuid(self, index: int) -> str:
        return self._g(index, "uuid").uuid

    def pci_bus_id(self, index: int) -> str:
        return self._g(index, "pci").bus

    def name(self, index: int) -> str:
        self._g(index, "name")
        return "NVIDIA H100 80GB HBM3"

    def temperature_c(self, index: int) -> int:
        return self._g(index, "temperature").temp

    def power_mw(self, index: int) -> int:
        return self._g(index, "power").power_mw

    def clock_mhz(self, index: int, clock: Literal["sm", "mem"]) -> int:
        g = self._g(index, "clock")
        return g.sm if clock == "sm" else g.mem

    def throttle_reasons(self, index: int) -> int:
        return self._g(index, "throttle").throttle

    def ecc_errors(self, index: int, error: EccError, counter: EccCounter) -> int:
        return self._g(index, "ecc").ecc.get((error, counter), 0)

    def remapped_rows(self, index: int) -> RemappedRows:
        return self._g(index, "rows").rows

    def nvlink_count(self, index: int) -> int:
        return self._g(index, "nvlink").links

    def nvlink_errors(self, index: int, link: int, counter: NvLinkCounter) -> int:
        return self._g(index, "nvlink").link_errors.get((link, counter), 0)

    def watch_xids(self, indices: list[int]) -> None:
        if self.watch_error:
            raise self.watch_error
        self.watched = indices

    def wait_xid(self, timeout_ms: int) -> XidEvent | None:
        self.waits.append(timeout_ms)
        return self.events.popleft() if self.events else None


def agent(nvml: FakeNvml, sink: ListSink) -> NvmlAgent:
    a = NvmlAgent(sink, "raw.telemetry", "raw.logs", nvml, node="gpu-03", cluster="c1", clock=lambda: NOW)
    a.start()
    return a


def rules_of(sink: ListSink) -> list[tuple[str, Any]]:
    out = []
    for t, v, k in sink.records:
        if t == "raw.logs":
            for s in Extractor().extract(normalize(v, k.decode() if k else None), NOW):
                out.append((s.rule, s.gpu))
    return out


def test_each_sample_is_one_gpu_telemetry_record_per_gpu_with_dcgm_field_names():
    nvml = FakeNvml([FakeGpu(0, "00000000:3B:00.0"), FakeGpu(1, "00000000:5E:00.0")])
    nvml.gpus[1].throttle = 0x4
    nvml.gpus[1].ecc[("corrected", "aggregate")] = 12
    nvml.gpus[1].link_errors = {(0, "replay"): 2, (17, "replay"): 3, (5, "crc_flit"): 1}
    sink = ListSink()
    a = agent(nvml, sink)
    assert a.sample_once() == 2
    recs = [GpuTelemetry.model_validate(v) for v in sink.on("raw.telemetry")]
    g1 = recs[1]
    assert (g1.node, g1.gpu, g1.uuid, g1.pci_bus_id, g1.model, g1.driver, g1.source, g1.cluster) == (
        "gpu-03",
        1,
        nvml.gpus[1].uuid,
        "00000000:5E:00.0",
        "NVIDIA H100 80GB HBM3",
        "550.54.15",
        "nvml",
        "c1",
    )
    assert g1.metrics["DCGM_FI_DEV_POWER_USAGE"] == 312.457
    assert g1.metrics["DCGM_FI_DEV_SM_CLOCK"] == 1980 and g1.metrics["DCGM_FI_DEV_MEM_CLOCK"] == 2619
    assert g1.metrics["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 4
    assert g1.metrics["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"] == 12
    assert g1.metrics["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"] == 5
    assert g1.metrics["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"] == 1
    assert g1.metrics["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 0
    assert all(k == b"gpu-03" for _, _, k in sink.records)
    assert sink.on("raw.logs") == [] and nvml.watched == [0, 1]


def test_an_xid_event_becomes_the_kernel_line_that_the_xid_rule_attributes_to_the_gpu():
    nvml = FakeNvml([FakeGpu(0, "00000000:3B:00.0"), FakeGpu(1, "00000000:5E:00.0")])
    nvml.events.extend([XidEvent(index=1, code=79), XidEvent(index=0, code=13)])
    sink = ListSink()
    a = agent(nvml, sink)
    assert a.wait_events(500) == 2
    assert nvml.waits == [500, 0, 0]  # blocks once, then drains what is queued
    assert [r["line"] for r in sink.on("raw.logs")] == [
        "NVRM: Xid (PCI:0000:5e:00): 79, reported by NVML (nvmlEventTypeXidCriticalError)",
        "NVRM: Xid (PCI:0000:3b:00): 13, reported by NVML (nvmlEventTypeXidCriticalError)",
    ]
    assert rules_of(sink) == [("gpu.xid", "0000:5e:00"), ("gpu.xid", "0000:3b:00")]


def test_new_double_bit_errors_and_row_remap_failure_become_dcgm_health_lines():
    nvml = FakeNvml([FakeGpu(0, "00000000:3B:00.0"), FakeGpu(1, "00000000:5E:00.0")])
    nvml.gpus[0].ecc[("uncorrected", "volatile")] = 1  # already there at start: baseline only
    sink = ListSink()
    a = agent(nvml, sink)
    a.sample_once()
    nvml.gpus[0].ecc[("uncorrected", "volatile")] = 3
    nvml.gpus[1].rows = RemappedRows(0, 1, False, True)
    a.sample_once()
    assert [r["line"] for r in sink.on("raw.logs")] == [
        "Detected 2 volatile double-bit ECC error(s) in GPU 0.",
        "GPU 1 had uncorrectable memory errors and row remapping failed.",
    ]
    assert [rule for rule, _ in rules_of(sink)] == ["gpu.ecc_dbe", "gpu.row_remap_failure"]
    a.sample_once()
    assert len(sink.on("raw.logs")) == 2


def test_a_gpu_that_is_lost_is_reported_once_in_nvidia_smi_words_and_no_longer_sampled():
    nvml = FakeNvml([FakeGpu(0, "00000000:3B:00.0"), FakeGpu(1, "00000000:5E:00.0")])
    sink = ListSink()
    a = agent(nvml, sink)
    nvml.gpus[0].lost = True
    assert a.sample_once() == 1
    assert a.sample_once() == 1
    lines = [r["line"] for r in sink.on("raw.logs")]
    assert lines == [
        "Unable to determine the device handle for gpu 0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU"
    ]
    assert rules_of(sink)[0][0] == "gpu.nvml_lost_gpu"
    gpu0 = next(r for r in a.reached() if r.target.startswith("GPU 0"))
    assert (gpu0.ok, gpu0.state) == (False, "lost") and a.coverage.counts()["lost_gpus"] == 1


def test_unsupported_fields_are_skipped_for_good_and_listed_in_the_coverage_report():
    gpu = FakeGpu(0, "00000000:3B:00.0")
    gpu.unsupported = {"rows", "nvlink"}
    nvml = FakeNvml([gpu])
    nvml.watch_error = NvmlNotSupported("Not Supported", 3)
    sink = ListSink()
    a = agent(nvml, sink)
    a.sample_once()
    calls = nvml.calls
    a.sample_once()
    rec = GpuTelemetry.model_validate(sink.on("raw.telemetry")[-1])
    assert "DCGM_FI_DEV_ROW_REMAP_FAILURE" not in rec.metrics and "DCGM_FI_DEV_GPU_TEMP" in rec.metrics
    assert nvml.calls - calls == 9  # temp, power, 2 clocks, throttle, 4 ECC: nothing retried
    nvml_reach, xid_reach, gpu_reach = a.reached()
    assert (nvml_reach.ok, nvml_reach.state) == (True, "driver 550.54.15; 1 GPUs")
    assert (xid_reach.ok, xid_reach.state, xid_reach.detail) == (False, "unavailable", "Not Supported")
    assert (gpu_reach.ok, gpu_reach.state) == (True, "sampling; 0 NVLinks")
    assert gpu_reach.detail == "not supported: nvlink, remapped_rows"


def test_bus_ids_are_printed_as_nvidia_smi_prints_them():
    assert smi_bus_id("00000000:3B:00.0") == "0000:3B:00.0"
    assert smi_bus_id("0001:af:00.1") == "0001:AF:00.1"


def test_without_libnvidia_ml_the_command_says_so_and_exits_non_zero():
    env = {
        "PATH": os.environ["PATH"],
        "SICKBAY_KAFKA_BOOTSTRAP": "127.0.0.1:1",
        "LD_LIBRARY_PATH": "/nonexistent",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "collect", "nvml", "--once"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "libnvidia-ml.so.1 cannot be loaded" in proc.stderr


def test_the_loop_samples_each_interval_and_takes_xid_events_in_between_in_short_waits():
    nvml = FakeNvml([FakeGpu(0, "00000000:3B:00.0")])
    nvml.events.append(XidEvent(index=0, code=79))
    sink = ListSink()
    a = agent(nvml, sink)
    ticks: list[int] = []
    a.run(0.3, lambda: False, on_tick=lambda: ticks.append(1), stop_after_s=0.5)
    assert len(sink.on("raw.telemetry")) == 3  # at 0 s, 0.3 s and 0.6 s, then stop_after ends it
    assert [r["line"] for r in sink.on("raw.logs")] == [
        "NVRM: Xid (PCI:0000:3b:00): 79, reported by NVML (nvmlEventTypeXidCriticalError)"
    ]
    assert nvml.waits and max(nvml.waits) <= 500 and len(ticks) > 3
