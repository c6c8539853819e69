from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from connectors.sources.simulator import background_records, parse_speed, timetable
from connectors.sources.simulator.fleetsim import FleetOptions, simulate_fleet
from connectors.sources.simulator.output import Record, play
from schemas import codec
from streams.extract.normalize import normalize


def test_default_fleet_has_jobs_scheduler_events_and_telemetry():
    run = simulate_fleet(5, FleetOptions(minutes=15))
    events = list(run.events())
    assert events == sorted(events, key=lambda e: e.sort_key())
    assert len({n.name for n in run.nodes}) == 64 and all(len(n.gpus) == 8 for n in run.nodes)
    lines = [e.line for e in events if e.kind == "scheduler"]
    assert sum("_slurm_rpc_submit_batch_job" in ln for ln in lines) == 6
    assert any("sched: Allocate" in ln or "_start_job" in ln for ln in lines)
    assert {e.origin for e in events if e.kind == "telemetry"} == {n.name for n in run.nodes}
    assert 1 <= len(run.truths) <= 3
    for t in run.truths:
        assert t.decisive_time < run.t_end


def test_ten_thousand_nodes_generate_in_reasonable_time():
    t = time.monotonic()
    run = simulate_fleet(
        3, FleetOptions(nodes=10_000, jobs=40, faults=10, minutes=1.0, telemetry_metrics="min")
    )
    n = sum(1 for e in run.events() if e.kind == "telemetry")
    elapsed = time.monotonic() - t
    assert n == 10_000 * 8  # one scrape of one series per GPU in the minute
    assert elapsed < 60, f"{elapsed:.1f}s"


def test_speed_parsing_and_pacing():
    assert parse_speed("realtime") == 1.0 and parse_speed("x60") == 60.0 and parse_speed("10x") == 10.0
    assert parse_speed("max") is None
    t0 = datetime(2026, 11, 29, tzinfo=UTC)
    recs = [Record(t0 + timedelta(seconds=s), b"h", b"v", False, "kernel") for s in (0, 60, 61, 600)]
    assert [o for o, _ in timetable(recs, speed=60)] == [0, 1, 61 / 60, 10]
    assert [o for o, _ in timetable(recs, speed=1, max_gap_s=2)] == [0, 2, 3, 5]
    assert [o for o, _ in timetable(recs, speed=None)] == [0, 0, 0, 0]
    clock = [0.0]
    sent: list[float] = []
    play(
        timetable(recs, speed=60),
        lambda off, _r: sent.append(off),
        clock=lambda: clock[0],
        sleep=lambda s: clock.__setitem__(0, clock[0] + s),
    )
    assert [round(s, 2) for s in sent] == [0, 1, 1.02, 10]


def test_background_records_are_healthy_and_readable():
    recs = background_records(3, ["gpu-01", "gpu-02", "gpu-03", "gpu-04"], "4242", 300)
    assert len(recs) > 20
    texts = [normalize(r).text for r in recs]
    assert any("NCCL INFO" in t for t in texts)
    assert not any(b'"name":"DCGM_' in r for r in recs)
    joined = "\n".join(texts)
    for fault in ("Xid", "Watchdog caught", "Error", "Killed process", "CANCELLED", "Link down"):
        assert fault not in joined
    assert all(codec.loads(r) for r in recs if r.startswith(b"{"))
