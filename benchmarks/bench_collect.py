"""Collector throughput: lines from files into the real Kafka broker (``make bench-collect``).

What is measured is ``sickbay collect files --once`` as it runs, in process: a
:class:`FileCollector` reads a cached corpus of realistic training-job log lines
(PyTorch/NCCL chatter, a few kernel lines, some shipper JSON), frames lines,
batches ``--lines-per-record`` consecutive plain lines into one
``SickbayLinesRecord`` (orjson), and a :class:`ReliableProducer` with a spool sends
them (idempotent, acks=all, lz4, linger 20 ms). The clock stops when every record
is acknowledged by the broker and offsets are saved; the topic's high watermarks
are then checked against the number of records sent (nothing lost, nothing extra).

Side by side, the same bytes are produced by a bare confluent-kafka Producer: the
file's lines in records of ``--lines-per-record`` lines (raw bytes, no framing, no
JSON, no offsets, no spool; shipper JSON lines are not split out): the ratio says
what sickbay's framing and bookkeeping cost over librdkafka itself. The collector
with one record per line is shown too.

Prints progress to stderr, appends a row to benchmarks/RESULTS.md and prints
``{"lines_per_s": ...}`` as its last line. ``--profile`` prints the collector's
top functions (cProfile) instead of recording.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.machine import append_row, describe, today
from connectors.kafka import (
    KafkaUnavailable,
    ReliableProducer,
    admin,
    consumer_config,
    ensure_topics,
    producer_config,
    wait_for_broker,
)
from connectors.sources.files import FileCollector
from connectors.sources.spool import Spool
from schemas.topics import TopicSpec
from streams.settings import REPO_ROOT

SECTION = "Collector: files → Kafka (make bench-collect)"
HEADER = (
    "| date | machine | corpus | lines/record | sickbay lines/s | MB/s | bare confluent-kafka lines/s "
    "(same lines, same batch size) | ratio | sickbay, 1 line/record | notes |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)
CACHE = REPO_ROOT / ".cache" / "bench"
PARTITIONS = 4


def corpus(lines: int) -> Path:
    """A deterministic mix of what a training job's log and a node's syslog hold (cached)."""
    path = CACHE / f"collect-corpus-{lines}.log"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    rng = random.Random(8)
    templates = [
        "[rank{r}]:[I1129 03:{m:02d}:{s:02d}.{us:06d} ProcessGroupNCCL.cpp:2012] [PG 0 Rank {r}] "
        "ProcessGroupNCCL broadcast unique ID through store took {x}.{y} ms",
        "{{'loss': {x}.{us}, 'grad_norm': 0.{y}, 'learning_rate': 1.5e-05, 'epoch': 0.{m}}}",
        "gpu-{n:02d}:{pid}:{pid} [{g}] NCCL INFO Channel {c:02d}/0 : {r} -> {x} via P2P/IPC/read",
        "Nov 29 03:{m:02d}:{s:02d} gpu-{n:02d} kernel: [ {pid}.{us}] perf: interrupt took too long "
        "({x} > {y})",
        "step {pid}: tokens/s={x}{y} mfu=0.{s} mem={g}.{c}GiB",
        '{{"@timestamp":1764417600.{us},"log":"iteration {pid} done","hostname":"gpu-{n:02d}"}}',
    ]
    weights = [30, 25, 25, 5, 14, 1]
    with open(path, "w") as fh:
        for _ in range(lines):
            t = rng.choices(templates, weights)[0]
            fh.write(
                t.format(
                    r=rng.randrange(64),
                    m=rng.randrange(60),
                    s=rng.randrange(60),
                    us=rng.randrange(10**6),
                    x=rng.randrange(1000),
                    y=rng.randrange(1000),
                    n=rng.randrange(1, 65),
                    pid=rng.randrange(10**5),
                    g=rng.randrange(8),
                    c=rng.randrange(32),
                )
                + "\n"
            )
    return path


def _records_on(bootstrap: str, topic: str) -> int:
    consumer = Consumer(consumer_config(bootstrap, f"bench-{uuid.uuid4().hex}", "bench-collect"))
    try:
        total = 0
        for p in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def run_collector(
    bootstrap: str, path: Path, lines_per_record: int, profile: bool = False
) -> dict[str, float]:
    topic = f"bench{uuid.uuid4().hex[:8]}.raw.logs"
    ensure_topics(bootstrap, [TopicSpec(name=topic, key="host", value="raw", partitions=PARTITIONS)])
    with tempfile.TemporaryDirectory(prefix="bench-collect-") as state:
        producer = ReliableProducer(bootstrap, "bench-collect", spool=Spool(Path(state) / "spool"))
        collector = FileCollector(
            producer,
            topic,
            [str(path)],
            host="gpu-01",
            offsets=Path(state) / "offsets.json",
            lines_per_record=lines_per_record,
        )
        prof = cProfile.Profile() if profile else None
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        collector.run(lambda: False, idle_exit_s=0.0, poll_s=0.0)
        left = collector.close(120)
        if prof:
            prof.disable()
        wall = time.perf_counter() - t0
        if prof:
            pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(18)
    on_topic = _records_on(bootstrap, topic)
    admin(bootstrap).delete_topics([topic])
    st = collector.stats
    if left or on_topic != st.records or producer.failed:
        raise RuntimeError(
            f"records sent {st.records}, on the topic {on_topic}, left {left}, failed {producer.failed}"
        )
    return {"lines": st.lines, "records": st.records, "wall": wall, "lines_per_s": st.lines / wall}


def run_bare(bootstrap: str, path: Path, lines_per_record: int) -> dict[str, float]:
    """The same lines in records of the same number of lines, through a bare Producer."""
    data = path.read_bytes().split(b"\n")[:-1]
    values = [b"\n".join(data[i : i + lines_per_record]) for i in range(0, len(data), lines_per_record)]
    topic = f"bench{uuid.uuid4().hex[:8]}.raw.bare"
    ensure_topics(bootstrap, [TopicSpec(name=topic, key="host", value="raw", partitions=PARTITIONS)])
    producer = Producer(producer_config(bootstrap, "bench-bare"))
    key = b"gpu-01"
    t0 = time.perf_counter()
    for v in values:
        while True:
            try:
                producer.produce(topic, v, key)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(120)
    wall = time.perf_counter() - t0
    on_topic = _records_on(bootstrap, topic)
    admin(bootstrap).delete_topics([topic])
    if left or on_topic != len(values):
        raise RuntimeError(f"bare producer: sent {len(values)}, on the topic {on_topic}, left {left}")
    return {"lines": len(data), "records": len(values), "wall": wall, "lines_per_s": len(data) / wall}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=2_000_000, help="corpus lines (default 2,000,000)")
    parser.add_argument("--lines-per-record", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=2, help="timed runs of each, best kept")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile one collector run; no RESULTS.md row"
    )
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    bootstrap = os.environ.get("SICKBAY_KAFKA_BOOTSTRAP", "127.0.0.1:39092")
    try:
        wait_for_broker(bootstrap, 30)
    except KafkaUnavailable as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    path = corpus(args.lines)
    size = path.stat().st_size
    print(
        f"corpus {path} ({args.lines:,} lines, {size / 2**20:.0f} MiB), broker {bootstrap}", file=sys.stderr
    )
    if args.profile:
        run_collector(bootstrap, path, args.lines_per_record, profile=True)
        return 0
    ours = max((run_collector(bootstrap, path, args.lines_per_record) for _ in range(args.repeat)), key=_rate)
    bare = max((run_bare(bootstrap, path, args.lines_per_record) for _ in range(args.repeat)), key=_rate)
    single = run_collector(bootstrap, path, 1)
    ratio = ours["lines_per_s"] / bare["lines_per_s"]
    mb_s = size / ours["wall"] / 1e6
    print(
        f"sickbay collect files: {ours['lines_per_s']:,.0f} lines/s ({mb_s:.0f} MB/s, {ours['records']:,} "
        f"records, up to {args.lines_per_record} lines each); bare confluent-kafka, the same lines in "
        f"records of {args.lines_per_record}: {bare['lines_per_s']:,.0f} lines/s; ratio {ratio:.2f}; "
        f"one line per record: {single['lines_per_s']:,.0f} lines/s",
        file=sys.stderr,
    )
    if not args.no_record:
        append_row(
            SECTION,
            HEADER,
            f"| {today()} | {describe()} | {args.lines:,} lines, {size / 2**20:.0f} MiB | "
            f"{args.lines_per_record} | "
            f"{ours['lines_per_s']:,.0f} | {mb_s:.0f} | {bare['lines_per_s']:,.0f} | {ratio:.2f} | "
            f"{single['lines_per_s']:,.0f} | local single-node broker on the same host, 4 partitions, lz4, "
            f"acks=all, idempotent; best of {args.repeat}; delivered counts checked on the topic |",
        )
    print(
        json.dumps(
            {
                "bare_lines_per_s": round(bare["lines_per_s"]),
                "ratio": round(ratio, 3),
                "one_line_per_record_lines_per_s": round(single["lines_per_s"]),
                "lines_per_s": round(ours["lines_per_s"]),
            }
        )
    )
    return 0


def _rate(r: dict[str, float]) -> float:
    return r["lines_per_s"]


if __name__ == "__main__":
    raise SystemExit(main())
