"""``sickbay collect prometheus`` against a real HTTP server (http.server in a thread) that serves
dcgm-exporter text and a Prometheus ``/api/v1/query`` answer in the documented JSON."""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from connectors.sources.prometheus import PrometheusCollector, parse_exposition
from schemas import codec
from schemas.telemetry import GpuTelemetry
from streams.extract.extractor import Extractor
from streams.extract.normalize import normalize
from tests.factories import ListSink

NOW = datetime(2026, 11, 29, 21, 0, tzinfo=UTC)
GPUS = [
    ("0", "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52", "00000000:3B:00.0"),
    ("1", "GPU-1d2e0a51-2f49-7bd3-9d57-0c3d6e0a8a11", "00000000:5E:00.0"),
]


def dcgm_text(xid: tuple[int, int] = (0, 0), dbe: tuple[int, int] = (0, 0), sm_clock: int = 1980) -> str:
    """What dcgm-exporter 3.3 prints with the default counters, one node, two H100s, Slurm job mapping."""
    fields: list[tuple[str, str, str, Callable[[int], float]]] = [
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda i: sm_clock),
        ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", lambda i: 2619),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda i: 41 + i),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda i: 312.457 + i),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", lambda i: xid[i]),
        (
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
            "gauge",
            "Current clock throttle reasons.",
            lambda i: 4 if i else 0,
        ),
        (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "gauge",
            "Ratio of time the graphics engine is active.",
            lambda i: 0.93,
        ),
        (
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "counter",
            "Total number of double-bit volatile ECC errors.",
            lambda i: dbe[i],
        ),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", lambda i: 0),
    ]
    out: list[str] = []
    for name, kind, help_text, value in fields:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for i, (gpu, uuid, bus) in enumerate(GPUS):
            labels = (
                f'gpu="{gpu}",UUID="{uuid}",pci_bus_id="{bus}",device="nvidia{gpu}",'
                f'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-03",DCGM_FI_DRIVER_VERSION="550.54.15",hpc_job="4711"'
            )
            out.append(f"{name}{{{labels}}} {value(i)}")
    out += ["# HELP go_goroutines Number of goroutines.", "# TYPE go_goroutines gauge", "go_goroutines 14"]
    return "\n".join(out) + "\n"


class Server:
    """Serves ``metrics`` at /metrics and ``query_answers[query]`` at /api/v1/query."""

    def __init__(self) -> None:
        self.metrics = dcgm_text()
        self.query_answers: dict[str, Any] = {}
        self.queries_seen: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/metrics":
                    body, ctype, code = outer.metrics.encode(), "text/plain; version=0.0.4", 200
                elif url.path == "/api/v1/query":
                    q = urllib.parse.parse_qs(url.query)["query"][0]
                    outer.queries_seen.append(q)
                    ans = outer.query_answers.get(
                        q, {"status": "error", "errorType": "bad_data", "error": "parse error"}
                    )
                    body, ctype, code = (
                        codec.dumps(ans),
                        "application/json",
                        200 if ans["status"] == "success" else 400,
                    )
                else:
                    body, ctype, code = b"404 page not found\n", "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    t = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def collector(sink: ListSink, **kw: Any) -> PrometheusCollector:
    return PrometheusCollector(sink, "raw.telemetry", "raw.logs", cluster="c1", clock=lambda: NOW, **kw)


def test_one_gpu_telemetry_record_per_gpu_per_scrape_with_dcgm_labels_mapped(server):
    sink = ListSink()
    col = collector(sink, metrics_urls=[server.url + "/metrics"])
    assert col.scrape_once() == 2
    recs = [(GpuTelemetry.model_validate(v), k) for v, k in sink.keyed("raw.telemetry")]
    assert len(recs) == 2
    by_gpu = {r.gpu: (r, k) for r, k in recs}
    r1, key = by_gpu[1]
    assert key == b"gpu-03"
    assert (r1.node, r1.uuid, r1.pci_bus_id, r1.model, r1.driver, r1.job_id, r1.cluster, r1.source) == (
        "gpu-03",
        GPUS[1][1],
        "00000000:5E:00.0",
        "NVIDIA H100 80GB HBM3",
        "550.54.15",
        "4711",
        "c1",
        "dcgm-exporter",
    )
    assert r1.metrics["DCGM_FI_DEV_SM_CLOCK"] == 1980
    assert r1.metrics["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(313.457)
    assert r1.metrics["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 4
    assert r1.metrics["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.93)
    assert len(r1.metrics) == 9
    assert sink.keyed("raw.logs") == []  # first scrape is the baseline
    (reach,) = col.coverage.reached()
    assert (reach.kind, reach.target, reach.ok, reach.state, reach.detail) == (
        "exporter",
        server.url + "/metrics",
        True,
        "2 GPUs; 1 ok, 0 failed",
        None,
    )
    assert col.coverage.counts()["non_gpu_samples"] == 1  # go_goroutines
    assert col.coverage.unmatched() == []


def test_a_new_xid_and_new_double_bit_errors_become_lines_the_existing_rules_attribute(server):
    sink = ListSink()
    col = collector(sink, metrics_urls=[server.url + "/metrics"])
    server.metrics = dcgm_text(xid=(13, 0))  # an old Xid already there at start: baseline, not a fault
    col.scrape_once()
    server.metrics = dcgm_text(xid=(13, 79), dbe=(2, 0))
    col.scrape_once()
    lines = sink.keyed("raw.logs")
    assert [v["line"] for v, _ in lines] == [
        "Detected 2 volatile double-bit ECC error(s) in GPU 0.",
        "NVRM: Xid (PCI:0000:5e:00): 79, reported by dcgm-exporter (DCGM_FI_DEV_XID_ERRORS)",
    ]
    signals = [
        s
        for v, k in lines
        for s in Extractor().extract(normalize(codec.dumps(v), k.decode() if k else None), NOW)
    ]
    assert sorted(s.rule for s in signals) == ["gpu.ecc_dbe", "gpu.xid"]
    xid = next(s for s in signals if s.rule == "gpu.xid")
    assert (xid.node, xid.attrs["code"], xid.gpu, xid.job_id) == ("gpu-03", 79, "0000:5e:00", "4711")
    col.scrape_once()  # unchanged values: nothing new
    assert len(sink.keyed("raw.logs")) == 2


def test_promql_instant_queries_merge_into_one_record_per_gpu(server):
    def vector(name: str, values: list[float]) -> dict[str, Any]:
        return {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [
                    {
                        "metric": {
                            "__name__": name,
                            "Hostname": "gpu-01",
                            "gpu": str(i),
                            "UUID": GPUS[i][1],
                            "instance": "10.0.0.7:9400",
                            "job": "dcgm-exporter",
                            "pod": "trainer-0",
                        },
                        "value": [1764450000.5, str(v)],
                    }
                    for i, v in enumerate(values)
                ],
            },
        }

    server.query_answers = {
        "DCGM_FI_DEV_GPU_TEMP": vector("DCGM_FI_DEV_GPU_TEMP", [40, 77]),
        "DCGM_FI_DEV_SM_CLOCK": vector("DCGM_FI_DEV_SM_CLOCK", [1980, 1410]),
    }
    sink = ListSink()
    col = collector(sink, prometheus_url=server.url, queries=[*server.query_answers, "sum(rate(x[5m]"])
    assert col.scrape_once() == 2
    recs = {r.gpu: r for r in (GpuTelemetry.model_validate(v) for v, _ in sink.keyed("raw.telemetry"))}
    assert recs[1].metrics == {"DCGM_FI_DEV_GPU_TEMP": 77, "DCGM_FI_DEV_SM_CLOCK": 1410}
    assert (recs[1].node, recs[1].job_id, recs[1].source) == ("gpu-01", "trainer-0", "prometheus")
    assert recs[1].time == datetime.fromtimestamp(1764450000.5, tz=UTC)
    bad = col.coverage.targets[f"{server.url} sum(rate(x[5m]"]
    assert bad.failed == 1 and "400" in (bad.last_error or "")


def test_an_unreachable_target_is_reported_and_the_others_still_scraped(server):
    sink = ListSink()
    col = collector(
        sink, metrics_urls=["http://127.0.0.1:9/metrics", server.url + "/metrics", server.url + "/nope"]
    )
    assert col.scrape_once() == 2
    reached = {r.target: r for r in col.coverage.reached()}
    assert not reached["http://127.0.0.1:9/metrics"].ok and "refused" in (
        reached["http://127.0.0.1:9/metrics"].detail or ""
    )
    assert not reached[server.url + "/nope"].ok and "404" in (reached[server.url + "/nope"].detail or "")
    assert reached[server.url + "/metrics"].ok
    server.metrics = "go_goroutines 14\n"  # answers, but names no GPU
    col.scrape_once()
    assert col.coverage.unmatched() == [server.url + "/metrics"]


def test_a_malformed_exposition_line_is_reported_and_the_rest_kept():
    text = (
        dcgm_text() + 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="x" 12\nDCGM_FI_DEV_GPU_TEMP{gpu="9"} notanumber\n'
    )
    samples, problems = parse_exposition(text)
    assert len(samples) == 19
    assert len(problems) == 2 and problems[0].startswith("line ")


def test_label_values_with_escapes_and_commas_are_read_exactly():
    samples, problems = parse_exposition(
        'm{a="x,y",b="say \\"hi\\"",c="back\\\\slash"} 1.5e3 1764450000000\n'
    )
    assert problems == []
    assert samples[0].labels == {"a": "x,y", "b": 'say "hi"', "c": "back\\slash"}
    assert samples[0].value == 1500.0
    assert samples[0].time == datetime.fromtimestamp(1764450000, tz=UTC)
