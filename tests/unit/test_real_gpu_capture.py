"""Output captured on a real NVIDIA H200 (driver 580.159.04, PyTorch 2.11, NCCL 2.28.9) by
``tests/fixtures/real_gpu/capture.sh``, replayed here so the suite needs no GPU.

Three things are checked against the real thing rather than against what we believed it prints:
the NVML binding's values go through the node agent into the telemetry contract; a healthy GPU under
full load (software power cap, clocks about 75 % of their maximum) is not a straggler; and each real
failure output yields the rules that attribute it, while the healthy lines around it yield none.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest

from connectors.sources.nvml import api as nvml_api
from connectors.sources.nvml.agent import NvmlAgent
from connectors.sources.nvml.api import EccCounter, EccError, NvLinkCounter, RemappedRows, XidEvent
from schemas import codec
from schemas.telemetry import GpuTelemetry
from streams.correlate.straggler import StragglerConfig, evaluate, observe_telemetry
from streams.extract.extractor import Extractor
from streams.extract.normalize import normalize
from tests.factories import ListSink

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "real_gpu" / "captured"
RECORDING = json.loads((CAPTURED / "nvml_recording.json").read_text())
NOW = datetime(2026, 11, 30, 0, 5, tzinfo=UTC)


def _replay(entry: dict[str, Any]) -> Any:
    if "error" in entry:
        cls = getattr(nvml_api, entry["error"])
        raise cls(entry["message"], entry["code"])
    return entry["value"]


class RecordedNvml:
    """The NvmlApi protocol answered from the recording: sample ``cursor`` of idle + busy samples."""

    def __init__(self) -> None:
        self.dev = RECORDING["devices"][0]
        self.samples = self.dev["idle"] + self.dev["busy"]
        self.cursor = 0

    def _s(self, key: str) -> Any:
        return _replay(self.samples[self.cursor][key])

    def init(self) -> None:
        _replay(RECORDING["init"])

    def shutdown(self) -> None:
        _replay(RECORDING["shutdown"])

    def driver_version(self) -> str:
        return str(_replay(RECORDING["driver_version"]))

    def device_count(self) -> int:
        return int(_replay(RECORDING["device_count"]))

    def uuid(self, index: int) -> str:
        return str(_replay(self.dev["uuid"]))

    def pci_bus_id(self, index: int) -> str:
        return str(_replay(self.dev["pci_bus_id"]))

    def name(self, index: int) -> str:
        return str(_replay(self.dev["name"]))

    def temperature_c(self, index: int) -> int:
        return int(self._s("temperature_c"))

    def power_mw(self, index: int) -> int:
        return int(self._s("power_mw"))

    def clock_mhz(self, index: int, clock: Literal["sm", "mem"]) -> int:
        return int(self._s(f"clock_{clock}"))

    def throttle_reasons(self, index: int) -> int:
        return int(self._s("throttle_reasons"))

    def ecc_errors(self, index: int, error: EccError, counter: EccCounter) -> int:
        return int(self._s(f"ecc_{error}_{counter}"))

    def remapped_rows(self, index: int) -> RemappedRows:
        return RemappedRows(**self._s("remapped_rows"))

    def nvlink_count(self, index: int) -> int:
        return int(_replay(self.dev["nvlink_count"]))

    def nvlink_errors(self, index: int, link: int, counter: NvLinkCounter) -> int:
        return int(_replay(self.dev["nvlink_errors_link0"][counter]))

    def watch_xids(self, indices: list[int]) -> None:
        _replay(RECORDING["watch_xids"])

    def wait_xid(self, timeout_ms: int) -> XidEvent | None:
        _replay(RECORDING["wait_xid_200ms"])
        return None


def _telemetry_of_every_sample() -> list[GpuTelemetry]:
    nvml, sink = RecordedNvml(), ListSink()
    t = [NOW]
    agent = NvmlAgent(
        sink, "raw.telemetry", "raw.logs", nvml, node="h200-01", cluster="c1", clock=lambda: t[0]
    )
    agent.start()
    for i in range(len(nvml.samples)):
        nvml.cursor = i
        t[0] = NOW + timedelta(seconds=10 * i)
        assert agent.sample_once() == 1
    assert agent.wait_events(200) == 0  # NVML's event wait timed out: no Xid, no line
    assert [t for t, _, _ in sink.records if t == "raw.logs"] == []
    return [GpuTelemetry.model_validate(codec.loads(v)) for t, v, _ in sink.records if t == "raw.telemetry"]


def test_the_real_binding_recorded_no_error_beyond_nvlink_not_supported_on_this_gpu():
    text = json.dumps(RECORDING)
    assert "binding_bug" not in text
    errors = {e["error"] for e in RECORDING["devices"][0]["nvlink_errors_link0"].values()}
    assert errors == {"NvmlNotSupported"}  # a single H200 in a VM has no NVLink


def test_real_h200_samples_become_telemetry_records_with_dcgm_field_names():
    recs = _telemetry_of_every_sample()
    assert len(recs) == 9
    first, loaded = recs[0], recs[-1]
    assert (first.model, first.driver, first.uuid, first.pci_bus_id, first.source) == (
        "NVIDIA H200",
        "580.159.04",
        "GPU-a59eb532-3e2b-7427-2a38-9a464faca28c",
        "00000000:00:06.0",
        "nvml",
    )
    assert (
        first.metrics["DCGM_FI_DEV_SM_CLOCK"] == 345
        and first.metrics["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 1
    )
    assert loaded.metrics["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 4  # software power cap under load
    assert 600 < loaded.metrics["DCGM_FI_DEV_POWER_USAGE"] < 700
    assert not any(k.startswith("DCGM_FI_DEV_NVLINK") for k in loaded.metrics)  # not supported: not zero


def test_a_healthy_gpu_at_its_power_cap_is_not_a_straggler():
    board = None
    found = []
    for rec in _telemetry_of_every_sample():
        board = observe_telemetry(board, rec)
        board, straggler = evaluate(board, "0", StragglerConfig())
        found.append(straggler)
    assert found == [None] * len(found)


# what each real failure output must yield (rule -> at least this many lines); rules not listed
# must not appear at all, so a new rule that fires on these files is a conscious change here.
# Python's traceback frames are lead hints (framework.python_traceback): every root below wins over
# them, and the diagnose test of these files checks that the verdict stays the root's.
TRACEBACK = "framework.python_traceback"
EXPECTED: dict[str, dict[str, int]] = {
    # the rank that left warns at exit that it never destroyed its group: a hint; the others timed out
    # in a collective, so diagnose keeps the timeout (streams/diagnose/teardown.py stays off)
    "torch_watchdog.stderr.txt": {
        "nccl.watchdog_timeout": 1,
        # PyTorch 2.6+'s "failure detected by watchdog at work sequence id: 2" (read since 2026-12-05)
        "nccl.watchdog_exception": 1,
        "nccl.taking_process_down": 1,
        "framework.exit_without_destroy_process_group": 1,
    },
    "torch_watchdog_nccl_info.stderr.txt": {
        "nccl.watchdog_timeout": 1,
        "nccl.watchdog_exception": 1,
        "framework.exit_without_destroy_process_group": 1,
    },
    # NCCL INFO init lines: only where the rank runs; then the teardown
    "torch_watchdog_nccl_info.stdout.txt": {"nccl.rank_placement": 1, "nccl.comm_aborted": 1},
    "torch_oom.stderr.txt": {"cuda.out_of_memory": 1, TRACEBACK: 1},
    "torch_device_assert.stderr.txt": {
        "framework.assertion_failed": 1,
        "cuda.device_side_assert": 1,
        "cuda.async_report_hint": 1,
        "cuda.debug_advice_hint": 1,
        TRACEBACK: 1,
    },
    "torch_sigkill.stderr.txt": {
        "framework.elastic_worker_failed": 1,
        "framework.child_failed": 1,
        "framework.elastic_exitcode": 1,
        "framework.elastic_signal": 1,
        TRACEBACK: 1,
    },
    "torch_exception.stderr.txt": {
        "framework.nan_loss": 1,
        "framework.elastic_worker_failed": 1,
        "framework.child_failed": 1,
        "framework.elastic_exitcode": 1,
        TRACEBACK: 1,
    },
    "torch_store_timeout.stderr.txt": {"infra.rendezvous_timeout": 1, TRACEBACK: 1},
    "dmesg_nvrm.txt": {},  # driver load, a boot-time FBHUB interrupt cleared, a deprecation notice
    "nvidia_smi_q.txt": {},
    "nvidia_smi_details.txt": {},
}


def _rules(path: Path) -> dict[str, int]:
    ex = Extractor()
    out: dict[str, int] = {}
    for line in path.read_text(errors="replace").splitlines():
        rec = codec.dumps({"log": line, "host": "h200-01", "job_id": "77"})
        for s in ex.extract(normalize(rec, "h200-01"), NOW):
            out[s.rule] = out.get(s.rule, 0) + 1
    return out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_failure_output_yields_the_rules_that_attribute_it_and_nothing_else(name: str) -> None:
    got = _rules(CAPTURED / name)
    want = EXPECTED[name]
    assert set(got) == set(want), got
    assert all(got[r] >= n for r, n in want.items()), got


def test_nccls_busid_and_nvmls_pci_id_name_the_same_real_gpu():
    from streams.correlate.state import nccl_bus_to_pci, placements

    ex = Extractor()
    sigs = []
    for line in (CAPTURED / "torch_watchdog_nccl_info.stdout.txt").read_text().splitlines():
        sigs += ex.extract(normalize(codec.dumps({"log": line, "host": "h200-01"}), "h200-01"), NOW)
    [(rank, place)] = placements(sigs).items()
    assert (rank, place.node, place.nranks, place.cuda_dev) == (0, "vm", 1, 0)  # NCCL's host: gethostname()
    nvml_pci = RECORDING["devices"][0]["pci_bus_id"]["value"]  # 00000000:00:06.0
    assert place.gpu == nccl_bus_to_pci("60") == "0000:" + nvml_pci.split(":", 1)[1].rsplit(".", 1)[0]


# what ``sickbay diagnose`` makes of each real failure output: its root, never the traceback the
# failure printed on the way (the same verdicts as before tracebacks were read at all)
DIAGNOSED = {
    "torch_device_assert.stderr.txt": ("application", "cuda.device_side_assert"),
    "torch_exception.stderr.txt": ("application", "framework.nan_loss"),
    "torch_oom.stderr.txt": ("application", "cuda.out_of_memory"),
    "torch_sigkill.stderr.txt": ("application", "framework.elastic_worker_failed"),
    "torch_store_timeout.stderr.txt": ("infrastructure", "infra.rendezvous_timeout"),
    "torch_watchdog.stderr.txt": ("unknown", "nccl.watchdog_timeout"),
}


@pytest.mark.parametrize("name", sorted(DIAGNOSED))
def test_diagnose_names_the_real_failures_root_not_the_traceback_it_printed(name: str) -> None:
    from streams.diagnose.driver import Diagnoser, summary

    verdict = summary(Diagnoser().run([str(CAPTURED / name)], NOW))
    root = verdict["root_cause"]
    assert isinstance(root, dict)
    assert (verdict["category"], root["rule"]) == DIAGNOSED[name]
