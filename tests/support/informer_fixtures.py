"""The `informers` fixture: informers a test starts, each stopped when the test ends
(registered in `tests/conftest.py`, so unit and integration tests share one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from provisioner.kube.informer import Informer


@pytest.fixture
def informers() -> Iterator[list[Informer]]:
    started: list[Informer] = []
    yield started
    for informer in started:
        informer.stop()
