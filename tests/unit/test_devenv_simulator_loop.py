"""The loop the Job and Pod simulators share (`devenv.simulator_loop`): it syncs its
informers before the first pass, outlives a failed pass (logged, retried next pass), and
stops its thread and its informers."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from devenv.simulator_loop import SimulatorLoop
from tests.support.waiting import eventually


class _Informer:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def wait_for_sync(self, timeout: float) -> bool:
        self.calls.append("sync")
        return True

    def stop(self) -> None:
        self.calls.append("stop")


@dataclass
class _Refusing(SimulatorLoop):
    """Its first pass fails, as a write the apiserver refuses would."""

    thread_name = "test-simulator"
    what = "test simulator"
    logger = logging.getLogger("atomic-gang.test-simulator")

    informer: _Informer = field(default_factory=_Informer)
    synced_at_first_pass: list[str] = field(default_factory=list)
    passes: int = 0

    def _open_informers(self, kube: Any) -> list[Any]:
        return [self.informer]

    def run_once(self) -> None:
        self.passes += 1
        if self.passes == 1:
            self.synced_at_first_pass = list(self.informer.calls)
            raise RuntimeError("the apiserver refused a write")


def test_a_failed_pass_is_logged_and_the_next_pass_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = _Refusing(api=None, poll_interval=0.01)
    with caplog.at_level(logging.WARNING, logger=loop.logger.name):
        loop.start()
        try:
            eventually(lambda: loop.passes >= 3, timeout=10, what="three passes")
        finally:
            loop.stop()
    assert loop.synced_at_first_pass == ["start", "sync"]
    assert [r.getMessage() for r in caplog.records] == [
        "test simulator pass failed: the apiserver refused a write"
    ]
    assert loop._thread is not None and not loop._thread.is_alive()
    assert loop.informer.calls[-1] == "stop"
