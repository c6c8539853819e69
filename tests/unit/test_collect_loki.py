"""``sickbay collect loki`` against a local HTTP server that implements ``/loki/api/v1/query_range``
as Loki documents it (a real Loki is not available here): inclusive ``start``, exclusive ``end``,
``limit`` over all streams, ``direction=forward``, ``resultType: streams``."""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from connectors.sources.loki import LokiCollector
from schemas import codec
from streams.extract.normalize import normalize_all

T0 = 1_764_450_000_000_000_000  # ns
POD = {
    "namespace": "llm",
    "pod": "pretrain-worker-3",
    "container": "trainer",
    "node_name": "gpu-03",
    "job": "llm/pretrain",
    "slurm_job_id": "4711",
    "stream": "stderr",
}
KERNEL = {"host": "gpu-01", "job": "varlogs", "filename": "/var/log/kern.log"}
QUERY = '{namespace="llm"} or {job="varlogs"}'


class FakeLoki:
    def __init__(self) -> None:
        self.entries: list[tuple[int, dict[str, str], str]] = []
        self.requests: list[dict[str, str]] = []
        self.fail_next: int | None = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
                outer.requests.append({**q, "tenant": self.headers.get("X-Scope-OrgID") or ""})
                code, body = outer.answer(url.path, q)
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def answer(self, path: str, q: dict[str, str]) -> tuple[int, bytes]:
        if self.fail_next is not None:
            code, self.fail_next = self.fail_next, None
            return code, b"too many outstanding requests\n"
        if path != "/loki/api/v1/query_range":
            return 404, b"404 page not found\n"
        if q["query"].startswith("rate("):
            return 200, codec.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}})
        start, end, limit = int(q["start"]), int(q["end"]), int(q["limit"])
        picked = sorted((e for e in self.entries if start <= e[0] < end), key=lambda e: e[0])[:limit]
        streams: dict[str, dict[str, Any]] = {}
        for ns, labels, line in picked:
            s = streams.setdefault(repr(sorted(labels.items())), {"stream": labels, "values": []})
            s["values"].append([str(ns), line])
        data = {
            "resultType": "streams",
            "result": list(streams.values()),
            "stats": {"summary": {"totalLinesProcessed": len(picked)}},
        }
        return 200, codec.dumps({"status": "success", "data": data})


@pytest.fixture
def loki() -> Iterator[FakeLoki]:
    srv = FakeLoki()
    t = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


class ListSink:
    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        self.records.append((value, key))

    def texts(self) -> list[str]:
        return [line.text for v, k in self.records for line in normalize_all(v, k.decode() if k else None)]


def make(loki: FakeLoki, sink: ListSink, **kw: Any) -> LokiCollector:
    return LokiCollector(
        sink, "raw.logs", loki.url, QUERY, clock_ns=lambda: T0 + 10**12, lookback_s=3600, **kw
    )


def test_lines_go_out_as_loki_push_bodies_whose_labels_give_host_pod_namespace_and_job(loki):
    loki.entries += [
        (T0 + 1, POD, "[rank3]: torch.distributed.DistBackendError: NCCL error"),
        (T0 + 2, KERNEL, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."),
        (T0 + 3, POD, "second line"),
    ]
    sink = ListSink()
    assert make(loki, sink).poll_once() == 3
    assert [k for _, k in sink.records] == [b"gpu-03", b"gpu-01"]  # one record per stream, keyed by host
    lines = [line for v, k in sink.records for line in normalize_all(v, None)]
    worker = lines[0]
    assert (worker.adapter, worker.host, worker.pod, worker.namespace, worker.container, worker.job_id) == (
        "loki",
        "gpu-03",
        "pretrain-worker-3",
        "llm",
        "trainer",
        "4711",
    )
    assert worker.event_time == datetime.fromtimestamp(T0 / 1e9, tz=UTC).replace(microsecond=0)
    kernel = lines[2]
    assert (kernel.host, kernel.file, kernel.job_id) == (
        "gpu-01",
        "/var/log/kern.log",
        None,
    )  # job="varlogs" is no job
    assert [line.text for line in lines] == [
        "[rank3]: torch.distributed.DistBackendError: NCCL error",
        "second line",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    ]
    req = loki.requests[0]
    assert (req["query"], req["direction"], req["start"]) == (
        QUERY,
        "forward",
        str(T0 + 10**12 - 3600 * 10**9),
    )


def test_a_restart_resumes_from_the_saved_cursor_without_repeating_lines_at_the_same_nanosecond(
    loki: FakeLoki, tmp_path: Path
) -> None:
    cursor = tmp_path / "loki.cursor"
    loki.entries += [(T0 + 1, POD, "a"), (T0 + 5, POD, "b"), (T0 + 5, KERNEL, "c")]
    first = ListSink()
    assert make(loki, first, cursor_path=cursor).poll_once() == 3
    assert codec.loads(cursor.read_bytes())["last_ns"] == T0 + 5
    loki.entries += [(T0 + 5, POD, "d, same nanosecond as b"), (T0 + 9, KERNEL, "e")]
    second = ListSink()
    col = make(loki, second, cursor_path=cursor)  # a new process: only the file carries the position
    assert col.poll_once() == 2
    assert second.texts() == ["d, same nanosecond as b", "e"]
    assert col.coverage.duplicates_skipped == 2  # b and c came back (start is inclusive) and were dropped
    assert loki.requests[-1]["start"] == str(T0 + 5)


def test_full_pages_are_followed_until_every_line_is_delivered_once(loki):
    loki.entries += [(T0 + i // 2, POD, f"line {i}") for i in range(9)]  # pairs share a timestamp
    sink = ListSink()
    col = make(loki, sink, limit=3)
    assert col.poll_once() == 9
    assert sink.texts() == [f"line {i}" for i in range(9)]
    assert col.poll_once() == 0


def test_lines_kafka_did_not_acknowledge_are_fetched_again(loki: FakeLoki, tmp_path: Path) -> None:
    loki.entries += [(T0 + 1, POD, "a"), (T0 + 2, POD, "b")]
    sink = ListSink()
    acked = [False]
    col = make(loki, sink, cursor_path=tmp_path / "c", checkpoint=lambda: acked[0])
    col.poll_once()
    assert not (tmp_path / "c").exists() and col.cursor is None
    acked[0] = True
    assert col.poll_once() == 2
    assert sink.texts() == ["a", "b", "a", "b"]  # at least once: the repeat, never a gap
    assert col.poll_once() == 0


def test_errors_and_metric_queries_are_reported_not_raised(loki):
    sink = ListSink()
    loki.fail_next = 429
    col = make(loki, sink)
    assert col.poll_once() == 0
    assert "429" in (col.coverage.last_error or "")
    metric = LokiCollector(sink, "raw.logs", loki.url, 'rate({job="x"}[1m])', clock_ns=lambda: T0)
    metric.poll_once()
    assert "must be a log selector" in (metric.coverage.last_error or "")
    down = LokiCollector(sink, "raw.logs", "http://127.0.0.1:9", QUERY, timeout_s=2)
    down.poll_once()
    (reach,) = down.coverage.reached()
    assert (reach.kind, reach.target, reach.ok) == ("api", "http://127.0.0.1:9", False) and sink.records == []
    assert reach.state.startswith("0 ok, 1 failed")


def test_the_tenant_is_sent_as_x_scope_orgid(loki):
    LokiCollector(ListSink(), "raw.logs", loki.url, QUERY, tenant="team-a", clock_ns=lambda: T0).poll_once()
    assert loki.requests[-1]["tenant"] == "team-a"


def test_with_a_delay_a_line_ingested_late_is_still_delivered(loki: FakeLoki) -> None:
    clock = [T0 + 10 * 10**9]
    sink = ListSink()
    col = LokiCollector(
        sink, "raw.logs", loki.url, QUERY, delay_s=5, lookback_s=60, clock_ns=lambda: clock[0]
    )
    loki.entries += [(T0 + 1 * 10**9, POD, "a"), (T0 + 8 * 10**9, POD, "b")]
    col.poll_once()
    assert sink.texts() == ["a"]  # b is younger than the delay: not yet
    loki.entries.append((T0 + 6 * 10**9, POD, "late: stamped before b, ingested after the first poll"))
    clock[0] += 4 * 10**9
    col.poll_once()
    assert sink.texts() == ["a", "late: stamped before b, ingested after the first poll", "b"]
    assert loki.requests[0]["end"] == str(T0 + 5 * 10**9)
