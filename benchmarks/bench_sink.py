"""Sink throughput: realistic signal records through the ClickHouse sink into embedded chdb.

What is measured is the sink's own path, as ``sickbay sink clickhouse`` runs it
minus Kafka: each record arrives as the JSON bytes the worker publishes,
:meth:`ClickHouseSink.add` validates it against the ``Signal`` contract and
encodes its row, and :class:`WritePipeline` inserts full batches (one in flight
in a writer thread) into a freshly migrated store (every table, materialized
view and rollup of the current schema). The records are made by the real
extractor from shipper-shaped lines (Fluent Bit kernel Xids, Vector NCCL
timeouts, CUDA errors, slurmctld allocations), then varied in node, time, id and
offset. The store is checked afterwards: every row is there, once.

Runs three times (fresh store each), prints progress to stderr, appends the
median run to benchmarks/RESULTS.md and prints ``{..., "rows_per_s": ...}`` as
its last line.

Where the time goes (2 cores): on the consuming thread, reading each signal's row
straight from the worker's JSON (orjson, column-type checks, the contract path only
for records that do not fit; ~8 us with the row encoding), while chdb parses, sorts,
compresses and writes the previous batch (~7 us of CPU per row, partly
multi-threaded) on the other core. Before the direct row path the consuming thread
spent ~12 us per row, mostly building the pydantic ``Signal``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

from benchmarks.machine import append_row, describe, today
from connectors.sinks.clickhouse_schema import get_client, migrate
from connectors.sinks.sink import Batch, ClickHouseSink, WritePipeline
from schemas import codec
from schemas.signals import Signal
from schemas.topics import TopicCatalog
from streams.extract.extractor import Extractor, Position
from streams.extract.normalize import normalize

T0 = datetime(2026, 11, 29, 3, 0, 0, tzinfo=UTC)


def _raw_records() -> list[tuple[bytes, str | None]]:
    """Shipper records as they reach raw.logs (value, key host)."""
    out: list[tuple[bytes, str | None]] = []
    for i, code in enumerate((79, 48, 63, 94, 119, 13, 31, 74)):
        node = f"gpu-{i + 1:02d}"
        line = (
            f"{T0.strftime('%b %d %H:%M:%S')} {node} kernel: [ 5321.108101] NVRM: Xid (PCI:0000:06:00): "
            f"{code}, pid=4242, name=python, Ch 00000008"
        )
        out.append((codec.dumps({"@timestamp": T0.timestamp(), "log": line, "hostname": node}), node))
    for rank in range(8):
        node = f"gpu-{rank // 2 + 1:02d}"
        line = (
            f"[rank{rank}]:[E1129 03:10:00.426415540 ProcessGroupNCCL.cpp:629] [Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1048576, "
            f"NumelOut=1048576, Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
        )
        vec = {"message": line, "timestamp": T0.isoformat(), "host": node, "file": "/scratch/slurm-42.out"}
        out.append((codec.dumps(vec), node))
    cuda = "RuntimeError: CUDA error: an illegal memory access was encountered"
    rec: dict[str, object] = {
        "@timestamp": T0.timestamp(),
        "log": cuda,
        "hostname": "gpu-05",
        "filename": "/scratch/x.out",
    }
    out.append((codec.dumps(rec), "gpu-05"))
    ts = T0.strftime("%Y-%m-%dT%H:%M:%S.000")
    alloc = f"[{ts}] sched: Allocate JobId=42 NodeList=gpu-[01-04] #CPUs=8 Partition=gpu"
    out.append((alloc.encode(), "ctld"))
    return out


def templates() -> list[Signal]:
    extractor = Extractor()
    found: list[Signal] = []
    for n, (raw, host) in enumerate(_raw_records()):
        found.extend(extractor.extract(normalize(raw, key_host=host), T0, Position("raw", 0, n)))
    if not found:
        raise RuntimeError("the extractor found no signal in the benchmark's records")
    return found


def payloads(n: int, nodes: int = 1024) -> list[bytes]:
    """``n`` distinct signal records, as the worker publishes them on signals.node / signals.job."""
    base = templates()
    out = []
    for i in range(n):
        s = base[i % len(base)]
        node = f"gpu-{i % nodes:04d}"
        src = s.source.model_copy(update={"partition": i % 4, "offset": i})
        out.append(
            codec.dumps(
                s.model_copy(
                    update={
                        "signal_id": f"{i:016x}",
                        "node": node,
                        "job_id": str(1000 + i // 5000),
                        "event_time": T0 + timedelta(milliseconds=i),
                        "source": src,
                    }
                )
            )
        )
    return out


class _TimedSink(ClickHouseSink):
    """The sink with a clock on its insert path (which runs in the pipeline's writer thread)."""

    write_s = 0.0

    def write(self, batch: Batch) -> None:
        started = time.perf_counter()
        super().write(batch)
        self.write_s += time.perf_counter() - started


def run(records: list[bytes], batch_size: int, path: str) -> dict[str, float]:
    client = get_client(f"chdb://{path}")
    try:
        migrate(client, "bench")
        cat = TopicCatalog(prefix="bench")
        topic = cat.signals_node.name
        sink = _TimedSink(client, "bench", cat)
        pipe = WritePipeline(sink, None)
        for rec in records[:batch_size]:  # warm-up: first insert, part creation, the views
            sink.add(topic, rec)
        sink.flush()
        client.command("TRUNCATE TABLE bench.signals")
        sink.write_s = 0.0
        gc.collect()
        gc.freeze()  # the long-lived start-up objects leave the collector's scans (as `sickbay serve` does)
        add_s = 0.0
        started = time.perf_counter()
        for k in range(0, len(records), batch_size):
            t = time.perf_counter()
            for i, rec in enumerate(records[k : k + batch_size], start=k):
                sink.add(topic, rec, i % 4, i)
            add_s += time.perf_counter() - t
            pipe.settle(wait=True)  # one batch in flight, as in run_sink
            pipe.start_write(time.monotonic(), due=True)
        pipe.settle(wait=True)
        elapsed = time.perf_counter() - started
        pipe.close()
        stored = int(client.query("SELECT count() FROM bench.signals FINAL").result_rows[0][0])
    finally:
        client.close()
        gc.unfreeze()
    return {"seconds": elapsed, "stored": stored, "add_s": add_s, "write_s": sink.write_s}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=20_000, help="rows per insert (the sink's default)")
    parser.add_argument("--runs", type=int, default=3, help="runs on a fresh store each; the median counts")
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    records = payloads(args.rows)
    avg = sum(len(r) for r in records) / len(records)
    print(f"{len(records)} signal records, {avg:.0f} bytes each on average", file=sys.stderr)
    runs = []
    for n in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="sickbay-bench-sink-") as path:
            r = run(records, args.batch, path)
        if r["stored"] != len(records):
            print(codec.dumps({"error": f"stored {r['stored']:.0f} rows, expected {len(records)}"}).decode())
            return 1
        runs.append(r)
        print(f"run {n + 1}: {len(records) / r['seconds']:,.0f} rows/s", file=sys.stderr)
    n = len(records)
    r = sorted(runs, key=lambda x: x["seconds"])[len(runs) // 2]  # the median run
    rate = n / r["seconds"]
    rates = [n / x["seconds"] for x in runs]
    validate_us, insert_us = r["add_s"] / n * 1e6, r["write_s"] / n * 1e6
    print(
        f"median of {len(runs)}: {n} rows in {r['seconds']:.2f} s: {rate:,.0f} rows/s "
        f"(validate+encode {validate_us:.1f} us/row on the consuming thread, "
        f"insert {insert_us:.1f} us/row in the writer thread, overlapped)",
        file=sys.stderr,
    )
    if not args.no_record:
        append_row(
            "Sink throughput (`make bench-sink`, signals → chdb)",
            "| date | machine | rows | batch | bytes/record | validate+encode us/row | insert us/row "
            "| median rows/s | all runs rows/s |\n|---|---|---|---|---|---|---|---|---|",
            f"| {today()} | {describe()} | {n} | {args.batch} | {avg:.0f} | {validate_us:.1f} | "
            f"{insert_us:.1f} | {rate:,.0f} | {', '.join(f'{x:,.0f}' for x in rates)} |",
        )
    summary = {
        "rows": n,
        "runs": len(runs),
        "validate_encode_us_per_row": round(validate_us, 2),
        "insert_us_per_row": round(insert_us, 2),
        "rows_per_s": round(rate),
    }
    print(codec.dumps(summary).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
