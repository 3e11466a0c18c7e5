"""The EC2 emulator in-process: moto's mock with `devenv.emulator.install()` applied."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from moto import mock_aws

from devenv.emulator import EmulatorState, install


@contextmanager
def emulator_in_process(
    monkeypatch: pytest.MonkeyPatch, wall_clock: Callable[[], float] | None = None
) -> Iterator[EmulatorState]:
    """A fresh emulator for one test, its switches at their defaults, its reservations on
    `wall_clock` when given."""
    # moto's 2,600 stock AMIs cost a quarter second per reset; the tests use the seeded
    # EKS AMIs only.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    with mock_aws():
        state = install()
        state.reset_switches()
        if wall_clock is not None:
            state.wall_clock = wall_clock
        yield state
        state.reset_switches()
