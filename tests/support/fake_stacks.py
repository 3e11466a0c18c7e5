"""The pool stacks (`StackOps`) in memory, for unit tests of the pool reconciler.

Which pools' stacks are prepared (and which the backend holds unprepared, `partial_pools`:
what a first `up` that failed partway left), and what each call was asked: `prepared` (the
specs handed to `prepare`), `destroyed`, `removed`, `recorded`; `asked` counts the reads
(`is_prepared`, `outputs`, `holds`), which wait on the stack's lock in production. A call named in
`failing` raises its error every time, after it is recorded. `reset()` goes back to the
stacks it was built with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from provisioner.controllers.ports import StackOps
from stacks.spec import PoolSpec


def outputs_of(pool: str) -> Any:
    """A prepared stack's outputs: the fields of `PoolOutputs` a launch reads."""
    return SimpleNamespace(
        launch_template_id="lt-0123456789abcdef0",
        placement_group_name=f"pg-{pool}",
        placement_group_id="pg-0123456789abcdef0",
        resource_ids=frozenset({"lt-0123456789abcdef0", "pg-0123456789abcdef0"}),
        spec=SimpleNamespace(instance_profile_name=None),
    )


class FakeStacks(StackOps):
    """`StackOps` over a set of prepared pools; see the module docstring. Subclassing the
    contract makes mypy hold every method to it."""

    def __init__(
        self,
        prepared_pools: Iterable[str] = (),
        *,
        failing: Mapping[str, Exception] | None = None,
    ) -> None:
        self._initial = frozenset(prepared_pools)
        self.failing = dict(failing or {})
        self.prepared_pools: set[str] = set()
        self.partial_pools: set[str] = set()
        self.prepared: list[PoolSpec] = []
        # Whether each prepare was asked to refresh the stack first, and what a prepare
        # reports it remade (a test sets it).
        self.refreshed_first: list[bool] = []
        self.repairs: tuple[str, ...] = ()
        self.destroyed: list[str] = []
        self.removed: list[str] = []
        self.recorded: list[tuple[str, str, tuple[str, ...]]] = []
        self.asked = 0
        self.reset()

    def reset(self) -> None:
        self.prepared_pools = set(self._initial)
        self.partial_pools.clear()
        self.prepared.clear()
        self.refreshed_first.clear()
        self.destroyed.clear()
        self.removed.clear()
        self.recorded.clear()
        self.asked = 0

    def _fail(self, call: str) -> None:
        failure = self.failing.get(call)
        if failure is not None:
            raise failure

    def is_prepared(self, pool: str) -> bool:
        self.asked += 1
        self._fail("is_prepared")
        return pool in self.prepared_pools

    def outputs(self, pool: str) -> Any:
        self.asked += 1
        self._fail("outputs")
        return outputs_of(pool) if pool in self.prepared_pools else None

    def holds(self, pool: str) -> bool:
        self.asked += 1
        self._fail("holds")
        return pool in self.prepared_pools or pool in self.partial_pools

    def prepare(self, spec: PoolSpec, *, refresh_first: bool = False) -> Any:
        self.prepared.append(spec)
        self.refreshed_first.append(refresh_first)
        self._fail("prepare")
        self.partial_pools.discard(spec.pool)
        self.prepared_pools.add(spec.pool)
        return SimpleNamespace(outputs=outputs_of(spec.pool), repairs=self.repairs)

    def record_instance_set(self, pool: str, group: str, instance_ids: Sequence[str]) -> None:
        self.recorded.append((pool, group, tuple(instance_ids)))
        self._fail("record_instance_set")

    def remove_instance_set(self, pool: str) -> None:
        self.removed.append(pool)
        self._fail("remove_instance_set")

    def destroy(self, pool: str) -> None:
        self.destroyed.append(pool)
        self._fail("destroy")
        self.prepared_pools.discard(pool)
        self.partial_pools.discard(pool)

    def recover(self) -> None:
        pass

    def step_down(self) -> None:
        pass
