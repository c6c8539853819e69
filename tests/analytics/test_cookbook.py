"""Every query of docs/sql-cookbook.md runs against the store (chdb here) over the seed fleet."""

from __future__ import annotations

import re

import pytest

from streams.settings import REPO_ROOT

pytestmark = pytest.mark.integration

COOKBOOK = REPO_ROOT / "docs" / "sql-cookbook.md"
BLOCKS = re.findall(r"^### (.+?)\n.*?```sql\n(.*?)```", COOKBOOK.read_text(), flags=re.S | re.M)


def test_the_cookbook_has_its_queries():
    assert len(BLOCKS) >= 15
    assert all("{db}" in sql for _title, sql in BLOCKS)


@pytest.mark.parametrize(("title", "sql"), BLOCKS, ids=[t for t, _s in BLOCKS])
def test_cookbook_query_runs(ch_client, seeded, title, sql):
    db, _fleet = seeded
    text = sql.replace("{db}", db)
    if text.lstrip().upper().startswith("INSERT"):
        ch_client.command(text)
        return
    rows = ch_client.query(text).result_rows
    relative_to_now = re.search(r"\b(now|today)\(", text) is not None
    if not relative_to_now:  # the seed history is fixed in time; "last N days" may be empty on a later date
        assert rows, f"{title}: no rows over the seed fleet"
