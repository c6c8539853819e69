"""``sickbay diagnose`` on 133 more real failure logs from public threads (thread-failures.jsonl).

Collected on 2026-11-30 in three rounds from GitHub issue threads the 82-case corpus does not use,
labelled by the same conventions (tests/corpus/README.md). Each round was read blind first, with the
rules of the rounds before it, and only then were rules written for its misses:
- round 1 (42 cases): category 16/42, restartable 27/42, isolate 33/42; after its rules 27, 28, 40;
- round 2 (46 cases): 25/46, 32/46, 41/46; after its rules 31, 37, 41;
- round 3 (45 cases): 19/45, 26/45, 37/45; after its rules 23, 29, 38.
All 133 now: category 81, restartable 94, isolate 119. The floors sit just under that; raise them
when attribution improves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus.scoring import THREADS, Outcome, rate, score, table


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    return score(Path(tmp_path_factory.mktemp("threads")), THREADS)


def test_the_thread_set_is_133_cases_apart_from_the_given_corpus(outcomes):
    from schemas import codec
    from tests.corpus.scoring import CORPUS

    given = {codec.loads(line)["source_url"] for line in CORPUS.read_text().splitlines()}
    threads = [codec.loads(line) for line in THREADS.read_text().splitlines()]
    assert len(outcomes) == len(threads) == 133
    assert not given & {t["source_url"] for t in threads}


def test_category_accuracy_stays_above_its_floor(outcomes):
    assert rate(outcomes, lambda o: o.got_category == o.want_category) >= 0.59, table(outcomes)


def test_gpu_faults_are_recognised(outcomes):
    gpu = [o for o in outcomes if o.want_category == "hardware_gpu"]
    assert rate(gpu, lambda o: o.got_category == "hardware_gpu") >= 0.68, table(outcomes)


def test_restartability_stays_above_its_floor(outcomes):
    assert rate(outcomes, lambda o: o.got_restartable == o.want_restartable) >= 0.69, table(outcomes)


def test_isolation_advice_stays_above_its_floor(outcomes):
    assert rate(outcomes, lambda o: o.got_isolate == o.want_isolate) >= 0.88, table(outcomes)


def test_no_healthy_node_is_ever_isolated(outcomes):
    wrong = [o.id for o in outcomes if o.got_isolate and not o.want_isolate]
    assert wrong == [], table(outcomes)
