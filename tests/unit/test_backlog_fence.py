"""The backlog probe's fence (streams/correlate/backlog.py): which positions are behind, and which
groups and topics the topology path crosses."""

from __future__ import annotations

from streams.correlate.backlog import Watched, behind, topology_path
from streams.settings import Settings


def test_a_position_committed_short_of_the_fence_is_behind():
    fence = {("g", "t", 0): 10, ("g", "t", 1): 7}
    assert behind(fence, {("g", "t", 0): 9, ("g", "t", 1): 7}) == [("g", "t", 0)]


def test_positions_committed_at_or_past_the_fence_are_not_behind():
    fence = {("g", "t", 0): 10, ("g", "t", 1): 7}
    assert behind(fence, {("g", "t", 0): 10, ("g", "t", 1): 12}) == []


def test_a_position_the_group_never_committed_on_is_not_behind():
    assert behind({("g", "t", 0): 10}, {}) == []


def test_the_topology_path_of_the_batched_extract_is_raw_logs_in_its_group_then_the_workers_topics():
    s = Settings(app_id="fleet", topic_prefix="p", partitions=3, extract_stage="batched")
    assert topology_path(s) == [
        Watched("fleet-extract", (("p.raw.logs", 3),)),
        Watched("fleet", (("p.signals.job", 3), ("p.topology.node", 3))),
    ]
    assert len(topology_path(s)[1].partitions()) == 6


def test_the_topology_path_of_the_extract_agent_is_all_in_the_workers_group():
    s = Settings(app_id="fleet", topic_prefix="p", partitions=2, extract_stage="agent")
    [only] = topology_path(s)
    assert only.group == "fleet"
    assert [t for t, _ in only.topics] == ["p.raw.logs", "p.signals.job", "p.topology.node"]


def test_the_probe_can_be_turned_off():
    assert Settings(unclaimed_probe_s="off").unclaimed_probe_s is None
