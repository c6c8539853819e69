"""Prometheus metrics of the API (the sink's live in connectors.sinks.metrics; /metrics serves both)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REQUESTS = Counter("sickbay_api_requests_total", "API requests", ["method", "route", "status"])
LATENCY = Histogram(
    "sickbay_api_request_seconds",
    "API request latency",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
PUBLISHED = Counter("sickbay_api_intents_published_total", "Intents the API published", ["kind"])
