"""Prometheus metrics of the sink, and of the pipeline as the sink sees it go by.

The sink reads every stage's output topic, so it is where sickbay can count
events per stage, incident detection latency, action outcomes and dead letters
without touching the hot path of the agents. Per-record counts are kept in plain
dicts by the sink and added to these metrics once per flush.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECORDS = Counter(
    "sickbay_stage_events_total",
    "Records seen on each stage's output topic (rate() gives events/s per stage)",
    ["stage"],
)
ROWS_WRITTEN = Counter("sickbay_sink_rows_written_total", "Rows inserted into ClickHouse", ["table"])
FLUSH_SECONDS = Histogram(
    "sickbay_sink_flush_seconds",
    "Time to insert one batch (all tables) into ClickHouse",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
FLUSH_FAILURES = Counter("sickbay_sink_flush_failures_total", "Inserts that failed and will be retried")
DEAD_LETTERS = Counter(
    "sickbay_dead_letters_total",
    "Dead letters: records the sink refused plus those other stages put on the DLQ topic",
    ["stage", "reason"],
)
BUFFERED = Gauge("sickbay_sink_buffered_rows", "Rows buffered, not yet inserted")
PAUSED = Gauge("sickbay_sink_paused", "1 while consumption is paused by backpressure")
CONSUMER_LAG = Gauge(
    "sickbay_consumer_lag", "Records behind the log end, per topic partition", ["group", "topic", "partition"]
)
INCIDENT_DETECT_SECONDS = Histogram(
    "sickbay_incident_detect_seconds",
    "First signal's event time to the incident's first revision (detection latency)",
    buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0),
)
ACTION_OUTCOMES = Counter(
    "sickbay_action_outcomes_total", "Action results by kind and status", ["kind", "status"]
)
ACTION_SECONDS = Histogram(
    "sickbay_action_seconds",
    "How long an adapter took to carry out an action (started to finished)",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
