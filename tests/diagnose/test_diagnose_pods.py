"""``sickbay diagnose`` on a folder of pod logs: a pod's log file is about the node the pod ran on."""

from __future__ import annotations

from streams.diagnose.driver import pod_host

PODS = {"llm-7-worker-1": "node-b", "llm-7-worker-10": "node-k", "llm-7-master-0": "node-a"}


def test_a_pod_log_is_placed_on_the_node_its_scheduled_event_named():
    assert pod_host("logs/pods/team-a_llm-7-worker-1.log", PODS) == "node-b"
    assert pod_host("/var/log/pods/team-a_llm-7-worker-10_0c1f/pytorch/0.log", PODS) == "node-k"
    assert pod_host("/var/log/containers/llm-7-master-0_team-a_pytorch-9f2e.log", PODS) == "node-a"


def test_a_name_inside_a_longer_word_or_an_unknown_pod_places_nothing():
    assert pod_host("logs/pods/team-a_llm-7-worker-12.log", PODS) is None
    assert pod_host("logs/job/slurm-300013.out", PODS) is None
