"""The worker's GIL switch interval follows where its extract stage runs (streams/app.py ``share_the_gil``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from streams.app import share_the_gil
from streams.settings import Settings


@pytest.fixture
def restore_switch_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_a_worker_with_an_extract_thread_hands_the_gil_over_every_half_millisecond(
    restore_switch_interval: None,
) -> None:
    share_the_gil(Settings(extract_process=False))
    assert sys.getswitchinterval() == pytest.approx(0.0005)


def test_a_worker_whose_extract_stage_runs_in_its_own_process_keeps_pythons_interval(
    restore_switch_interval: None,
) -> None:
    sys.setswitchinterval(0.001)
    share_the_gil(Settings())
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_the_switch_interval_is_an_operator_setting(
    restore_switch_interval: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SICKBAY_GIL_SWITCH_INTERVAL_S", "0.002")
    share_the_gil(Settings(extract_process=False))
    assert sys.getswitchinterval() == pytest.approx(0.002)


def test_a_switch_interval_out_of_range_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SICKBAY_GIL_SWITCH_INTERVAL_S", "0")
    with pytest.raises(ValueError, match="gil_switch_interval_s"):
        Settings()
