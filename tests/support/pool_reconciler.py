"""The GangNodePool reconciler's dependencies for unit tests: what a test names, the rest
refusing use, so a test says which parts its pass touches."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from provisioner.api.clock import FakeClock
from provisioner.api.settings import Settings
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool_deps import PoolReconcilerDeps

DEFAULT_NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class Unused:
    """A dependency the test's pass must not touch: any use fails, naming it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        raise AssertionError(f"the pass used {self._name}.{attribute}, which this test left out")


def pool_deps(
    *,
    settings: Settings,
    engine: Any = None,
    stacks: Any = None,
    kube: Any = None,
    pools: Any = None,
    nodes: Any = None,
    index: Any = None,
    executor: Any = None,
    recorder: Any = None,
    now: Callable[[], datetime] = lambda: DEFAULT_NOW,
    metrics: ControllerMetrics | None = None,
    index_interval: float = 10,
) -> PoolReconcilerDeps:
    """Dependencies for a pool reconciler (or its actions) under test. The instance index
    defaults to a real one over `engine`."""
    metrics = metrics or ControllerMetrics()
    if index is None and engine is not None:
        index = InstanceIndex(engine, settings.cluster_name, index_interval, FakeClock(), metrics)

    def part(value: Any, name: str) -> Any:
        return Unused(name) if value is None else value

    return PoolReconcilerDeps(
        kube=part(kube, "kube"),
        pools=part(pools, "pools"),
        nodes=part(nodes, "nodes"),
        engine=part(engine, "engine"),
        index=part(index, "index"),
        stacks=part(stacks, "stacks"),
        executor=part(executor, "executor"),
        settings=settings,
        recorder=part(recorder, "recorder"),
        now=now,
        metrics=metrics,
    )
