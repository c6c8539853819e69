"""``sickbay diagnose`` on 42 more real failure logs from public threads (thread-failures.jsonl).

Collected on 2026-11-30 from GitHub issue threads the 82-case corpus does not use, labelled by the
same conventions (tests/corpus/README.md). Read blind first, before any rule was written for them:
category 16/42, restartable 27/42, isolate 33/42. The rules those misses pointed to (wrappers of
the CUDA ECC error, pre-R470 RmInitAdapter lines, a GPU lost after a fatal PCIe error, NVLS
failures, storage EIO, cloud preemption, the container runtime's CUDA requirement) then took it to
27/42, 28/42 and 40/42. The floors sit just under that; raise them when attribution improves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus.scoring import THREADS, Outcome, score, table


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    return score(Path(tmp_path_factory.mktemp("threads")), THREADS)


def _rate(outcomes: list[Outcome], ok) -> float:
    return sum(1 for o in outcomes if ok(o)) / len(outcomes)


def test_the_thread_set_is_42_cases_apart_from_the_given_corpus(outcomes):
    from schemas import codec
    from tests.corpus.scoring import CORPUS

    given = {codec.loads(line)["source_url"] for line in CORPUS.read_text().splitlines()}
    threads = [codec.loads(line) for line in THREADS.read_text().splitlines()]
    assert len(outcomes) == len(threads) == 42
    assert not given & {t["source_url"] for t in threads}


def test_category_accuracy_stays_above_its_floor(outcomes):
    assert _rate(outcomes, lambda o: o.got_category == o.want_category) >= 0.62, table(outcomes)


def test_every_gpu_fault_is_recognised(outcomes):
    gpu = [o for o in outcomes if o.want_category == "hardware_gpu"]
    assert _rate(gpu, lambda o: o.got_category == "hardware_gpu") >= 0.85, table(outcomes)


def test_restartability_stays_above_its_floor(outcomes):
    assert _rate(outcomes, lambda o: o.got_restartable == o.want_restartable) >= 0.64, table(outcomes)


def test_isolation_advice_stays_above_its_floor(outcomes):
    assert _rate(outcomes, lambda o: o.got_isolate == o.want_isolate) >= 0.92, table(outcomes)


def test_no_healthy_node_is_ever_isolated(outcomes):
    wrong = [o.id for o in outcomes if o.got_isolate and not o.want_isolate]
    assert wrong == [], table(outcomes)
