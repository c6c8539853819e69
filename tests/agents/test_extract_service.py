"""The batched extract stage as a service of the worker: a stage that dies takes the worker down."""

from __future__ import annotations

import asyncio

from streams.app import create_app
from streams.extract.batched import BatchedExtract, register
from streams.pipeline import Pipeline, build
from streams.settings import Settings


class DyingStage(BatchedExtract):
    """Its thread fails at once, as one would on a fatal consumer error."""

    def _open(self) -> None:
        raise RuntimeError("fatal: the broker refused this consumer")

    def _close(self) -> None:
        pass


class IdleStage(BatchedExtract):
    def _open(self) -> None:
        pass

    def step(self) -> int:
        self._stop.wait(0.05)
        return 0

    def _close(self) -> None:
        pass


def _pipe(tmp_path) -> Pipeline:
    settings = Settings(app_id="svc-test", topic_prefix="svc", partitions=1, state_dir=tmp_path)
    return build(create_app(settings, store="memory://"), settings)


async def test_a_stage_whose_thread_dies_crashes_its_service_with_the_reason(tmp_path):
    service_cls = register(_pipe(tmp_path), DyingStage)
    service = service_cls(loop=asyncio.get_running_loop())
    await service.start()
    for _ in range(50):
        if service.crashed:
            break
        await asyncio.sleep(0.1)
    assert service.crashed
    assert "broker refused" in str(service.crash_reason)
    await service.stop()


async def test_a_healthy_stage_runs_until_the_service_stops_and_then_its_thread_ends(tmp_path):
    service_cls = register(_pipe(tmp_path), IdleStage)
    service = service_cls(loop=asyncio.get_running_loop())
    await service.start()
    await asyncio.sleep(1.5)  # past one watch interval
    assert not service.crashed and service.stage.alive()
    await service.stop()
    assert not service.stage.alive() and service.stage.error is None
