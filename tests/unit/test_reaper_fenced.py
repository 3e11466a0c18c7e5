"""A reaper sweep refused by the leadership fence (``cloud.fencing``) ends quietly: no
failure logged, and the loop is still there for the next sweep (a term that goes on)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provisioner.api.fencing import NotLeader
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.reaper import Reaper
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)


class DeposedOnce(FakeEngine):
    """The first sweep's call is refused by the fence (`NotLeader`); later ones answer."""

    def __init__(self) -> None:
        super().__init__()
        self.sweeps = 0
        self.second = threading.Event()

    def find_managed(self, *args: Any, **kwargs: Any) -> Any:
        self.sweeps += 1
        if self.sweeps == 1:
            raise NotLeader("TerminateInstances not sent")
        self.second.set()
        return super().find_managed(*args, **kwargs)


def test_a_sweep_stopped_by_the_fence_ends_quietly_and_the_loop_sweeps_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = DeposedOnce()
    reaper = Reaper(
        engine,
        "fenced",
        dict,
        0.01,
        lambda: T0,
        ControllerMetrics(),
        cache_problem=lambda: None,
        ownership_key=None,
        max_lifetime=timedelta(days=7),
        stack_record=lambda _pool: frozenset(),
    )
    reaper.start()
    try:
        assert engine.second.wait(10), "the reaper's loop died with the refused sweep"
    finally:
        reaper.stop()
    assert "reaper sweep failed" not in caplog.text
