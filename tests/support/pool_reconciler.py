"""The GangNodePool reconciler's dependencies for unit tests: what a test names, the rest
refusing use, so a test says which parts its pass touches."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from provisioner.api.clock import FakeClock
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.nodes import Node
from provisioner.api.settings import Defaults, LeaderElection, PulumiSettings, Settings
from provisioner.cloud.naming import OwnershipKey
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.launch_budget import LaunchBudget
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.deps import PoolReconcilerDeps
from provisioner.kube.cache import TypedCache
from tests.support.backends import UNREACHED_BACKEND
from tests.support.typed_caches import typed

DEFAULT_NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
NODE_ROLE_ARN = "arn:aws:iam::123456789012:role/node"


def reconciler_settings(**overrides: Any) -> Settings:
    """The settings a pool reconciler's unit test runs under: cluster `demo` in us-east-1,
    node role NODE_ROLE_ARN, no leader election, a state backend never reached; `overrides`
    by Python name."""
    return Settings(
        cluster_name="demo",
        defaults=Defaults(region="us-east-1", node_role_arn=NODE_ROLE_ARN),
        leader_election=LeaderElection(enabled=False),
        pulumi=PulumiSettings.model_validate(UNREACHED_BACKEND),
        **overrides,
    )


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
    ownership_key: OwnershipKey | None = None,
    budget: LaunchBudget | None = None,
    tag_budget: LaunchBudget | None = None,
) -> PoolReconcilerDeps:
    """Dependencies for a pool reconciler (or its actions) under test. The instance index
    defaults to a real one over `engine`."""
    metrics = metrics or ControllerMetrics()
    if index is None and engine is not None:
        index = InstanceIndex(engine, settings.cluster_name, index_interval, FakeClock(), metrics)

    def part(value: Any, name: str) -> Any:
        return Unused(name) if value is None else value

    def cache(value: Any, name: str, parse: Any) -> Any:
        # A raw fake (tests/support/informers.py) is read through a typed cache, as the
        # composition root reads the informers.
        if value is None or isinstance(value, TypedCache):
            return part(value, name)
        return typed(value, parse)

    return PoolReconcilerDeps(
        kube=part(kube, "kube"),
        pools=cache(pools, "pools", GangNodePool.from_dict),
        nodes=cache(nodes, "nodes", Node.from_dict),
        engine=part(engine, "engine"),
        index=part(index, "index"),
        stacks=part(stacks, "stacks"),
        executor=part(executor, "executor"),
        settings=settings,
        recorder=part(recorder, "recorder"),
        now=now,
        metrics=metrics,
        ownership_key=ownership_key,
        budget=budget or LaunchBudget(settings.launch_budget),
        tag_budget=tag_budget or LaunchBudget(settings.launch_budget),
    )
