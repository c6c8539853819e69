"""``sickbay diagnose`` on 82 real failure logs from public threads, labelled by what each thread established.

The floors are regression guards set just under today's measured scores (see
tests/corpus/README.md for how they moved); raise them when attribution improves.
Last measured (2026-12-02): category 70/82, hardware_gpu 9/10, restartable 70/82, isolate 78/82.
Never a false isolation: draining a healthy node is the one mistake we refuse.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus.scoring import Outcome, rate, score, table


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    return score(Path(tmp_path_factory.mktemp("corpus")))


def test_the_corpus_is_the_82_labelled_cases(outcomes):
    assert len(outcomes) == 82
    assert {o.want_category for o in outcomes} == {
        "hardware_gpu",
        "hardware_network",
        "hardware_host",
        "system_software",
        "application",
        "infrastructure",
        "unknown",
    }


def test_category_accuracy_stays_above_its_floor(outcomes):
    assert rate(outcomes, lambda o: o.got_category == o.want_category) >= 0.84, table(outcomes)


def test_hardware_gpu_failures_are_recognised(outcomes):
    gpu = [o for o in outcomes if o.want_category == "hardware_gpu"]
    assert rate(gpu, lambda o: o.got_category == "hardware_gpu") >= 0.85, table(outcomes)


def test_restartability_stays_above_its_floor(outcomes):
    assert rate(outcomes, lambda o: o.got_restartable == o.want_restartable) >= 0.84, table(outcomes)


def test_isolation_advice_stays_above_its_floor(outcomes):
    assert rate(outcomes, lambda o: o.got_isolate == o.want_isolate) >= 0.93, table(outcomes)


def test_no_healthy_node_is_ever_isolated(outcomes):
    wrong = [o.id for o in outcomes if o.got_isolate and not o.want_isolate]
    assert wrong == [], table(outcomes)


def test_the_culprit_matcher_reads_addresses_ranks_and_hosts():
    from tests.corpus.scoring import culprit_named

    assert culprit_named("GPU 7 (PCI:0000:db:00)", "GPU 0000:db:00")  # bus:device, function aside
    assert culprit_named("rank 39", "rank 39")
    assert culprit_named("ip-172-31-45-209", "ip-172-31-45-209.eu-north-1.compute.internal")
    assert culprit_named("10.128.0.103", "10.128.0.103")
    assert not culprit_named("10.128.0.103", "10.128.0.10")
    assert not culprit_named("c016", "c015")
    assert culprit_named("errol CPU#0Channel#2_DIMM#0", "errol")  # a host without a digit
    assert not culprit_named("errol", "GPU 3")
    assert not culprit_named("the errol-2 rack", "errol")  # a whole word only
    assert not culprit_named("GPU 0000:b3:00.0", "")


def test_the_culprit_the_thread_names_is_named(outcomes):
    """18 cases name a culprit (a host, a GPU's PCI address, a rank); 14 are named, 7 before
    2026-12-02 (then: dmesg's continued lines, a PBS job's one host, the dead peer of a log of
    victims, NCCL's suspect rank; 2026-12-04: a report's ``Node:`` header, the node Ray marked
    dead)."""
    named = [o for o in outcomes if o.want_culprit]
    assert len(named) == 18
    assert rate(named, lambda o: o.culprit_named) >= 14 / 18, [
        (o.id, o.want_culprit, o.got_culprit) for o in named
    ]
