"""The worker shortens the GIL switch interval (streams/app.py ``share_the_gil``)."""

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


def test_the_worker_hands_the_gil_over_every_half_millisecond_by_default(
    restore_switch_interval: None,
) -> None:
    share_the_gil(Settings())
    assert sys.getswitchinterval() == pytest.approx(0.0005)


def test_the_switch_interval_is_an_operator_setting(
    restore_switch_interval: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SICKBAY_GIL_SWITCH_INTERVAL_S", "0.002")
    share_the_gil(Settings())
    assert sys.getswitchinterval() == pytest.approx(0.002)


def test_a_switch_interval_out_of_range_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SICKBAY_GIL_SWITCH_INTERVAL_S", "0")
    with pytest.raises(ValueError, match="gil_switch_interval_s"):
        Settings()
