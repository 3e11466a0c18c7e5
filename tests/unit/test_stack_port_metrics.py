"""Every call through the stack port is timed into `atomic_gang_stack_operation_seconds`
with its operation and result: "succeeded", or the failure's kind — for a `StackError` the
driver raised and for anything else the port classifies on the way out."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import pytest

from provisioner.api.constants import FailureKind
from provisioner.controllers.metrics import ControllerMetrics, StackMetrics
from provisioner.pulumi_driver.driver import StackDriver
from provisioner.pulumi_driver.port import PoolStacks, StackError

pytestmark = pytest.mark.unit

METRIC = "atomic_gang_stack_operation_seconds"


@dataclass
class Done:
    outputs: Any
    repairs: tuple[str, ...] = ()


class FakeDriver:
    """The driver calls the port makes: prepare updates, record meets a lock, remove breaks
    before the CLI runs (a plain exception), destroy succeeds."""

    def __init__(self) -> None:
        self.prepared: set[str] = set()

    def outputs(self, pool: str) -> Any:
        return f"outputs-of-{pool}" if pool in self.prepared else None

    def needs_prepare(self, spec: Any) -> bool:
        return spec.pool not in self.prepared

    def prepare(self, spec: Any, *, refresh_first: bool = False) -> Done:
        self.prepared.add(spec.pool)
        return Done(self.outputs(spec.pool))

    def record_instance_set(self, pool: str, group: str, instance_ids: Sequence[str]) -> None:
        raise StackError("StackLocked", "locked", kind=FailureKind.RETRYABLE, pool=pool)

    def remove_instance_set(self, pool: str) -> None:
        raise ValueError("the state does not parse")

    def destroy(self, pool: str) -> None:
        self.prepared.discard(pool)


@dataclass(frozen=True)
class Spec:
    pool: str


def _count(metrics: ControllerMetrics, operation: str, result: str) -> float:
    labels = {"operation": operation, "result": result}
    return metrics.registry.get_sample_value(f"{METRIC}_count", labels) or 0.0


def _observed(metrics: ControllerMetrics, call: Any) -> dict[tuple[str, str], float]:
    """What each (operation, result) series of `metrics` gained during ``call``."""
    series = [
        (op, result)
        for op in ("read", "prepare", "record", "remove", "destroy")
        for result in ("succeeded", *(k.value for k in FailureKind))
    ]
    before = {s: _count(metrics, *s) for s in series}
    with contextlib.suppress(StackError):
        call()
    after = {s: _count(metrics, *s) for s in series}
    return {s: after[s] - before[s] for s in series if after[s] != before[s]}


def test_each_stack_operation_is_timed_with_its_operation_and_result() -> None:
    metrics = ControllerMetrics()
    stacks = PoolStacks(cast(StackDriver, FakeDriver()), StackMetrics(metrics))
    spec = cast(Any, Spec("pool-a"))

    # A real update, then a prepare that finds nothing to change: timed as a read.
    assert _observed(metrics, lambda: stacks.prepare(spec)) == {
        ("read", "succeeded"): 1,
        ("prepare", "succeeded"): 1,
    }
    assert _observed(metrics, lambda: stacks.prepare(spec)) == {("read", "succeeded"): 1}
    # A StackError keeps its kind as the result label.
    assert _observed(metrics, lambda: stacks.record_instance_set("pool-a", "gen-0", ["i-1"])) == {
        ("record", "retryable"): 1
    }
    assert _observed(metrics, lambda: stacks.destroy("pool-a")) == {("destroy", "succeeded"): 1}


def test_a_failure_the_port_classifies_is_timed_with_its_kind_and_leaves_as_a_stack_error() -> None:
    metrics = ControllerMetrics()
    stacks = PoolStacks(cast(StackDriver, FakeDriver()), StackMetrics(metrics))
    inf = {"operation": "remove", "le": "+Inf"}

    with pytest.raises(StackError) as failed:
        stacks.remove_instance_set("pool-a")
    kind = failed.value.kind.value
    before = metrics.registry.get_sample_value(f"{METRIC}_bucket", {**inf, "result": kind})

    assert _observed(metrics, lambda: stacks.remove_instance_set("pool-a")) == {("remove", kind): 1}
    after = metrics.registry.get_sample_value(f"{METRIC}_bucket", {**inf, "result": kind})
    assert before is not None and after == before + 1
