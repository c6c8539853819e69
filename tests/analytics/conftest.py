"""Fixtures for the analytics tests: one chdb store per session (chdb allows one path per process)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from connectors.sinks.clickhouse_schema import get_client, migrate
from tests.analytics.seed import Fleet, seed


@pytest.fixture(scope="session")
def ch_client(clickhouse_dsn: str) -> Iterator[Any]:
    client = get_client(clickhouse_dsn)
    yield client
    client.close()


@pytest.fixture
def fresh_db(ch_client: Any) -> Iterator[str]:
    name = f"an_{uuid.uuid4().hex[:10]}"
    migrate(ch_client, name)
    yield name
    ch_client.command(f"DROP DATABASE IF EXISTS {name}")


@pytest.fixture(scope="module")
def seeded(ch_client: Any) -> Iterator[tuple[str, Fleet]]:
    """A migrated database holding the seed fleet (read-only for the tests that use it)."""
    name = f"an_{uuid.uuid4().hex[:10]}"
    migrate(ch_client, name)
    fleet = seed(ch_client, name)
    yield name, fleet
    ch_client.command(f"DROP DATABASE IF EXISTS {name}")
