"""The pool's phases as one table: for each, what a pass reads, what plans it, what it says.

One row per `Phase` (`PHASES`), and one for a pool being deleted whatever its phase
(`DELETING`), says:

- `fresh`: the pass lists the pool's instances from EC2, not from the shared index: a pool
  about to act on its instances (a launch, a release) acts on what EC2 says now.
- `stack`: when the pass reads the stack's outputs (may run the Pulumi CLI): `StackRead`.
- `launch`: when it reads the launch facts (the cluster, AMI, instance type and
  reservation a prepare and a launch are built from): `LaunchRead`. Only a pass that reads
  them may launch.
- `plan`: the function that plans the phase, given what the pass read.
- `progressing`: whether the pool's Progressing condition is True in the phase.
- `serves_gang`: whether the phase's set is (or is becoming) a gang's: a claim's end may not
  be seen yet, so the reaper takes no set in it for an expired keep-warm tag.

What a row does not read, the view holds as `NotFetched`, and a planner takes the view its
row's fetches give (`PoolView[StackRead, NotFetched]`, ...): a planner that reads what its
row does not fetch fails type checking, and so does a row whose planner wants a view its
fetches do not give (`PhaseRow` ties the two by its type parameters).

`reads_fresh`, `needs_stack` and `may_launch` (the reconciler's observe step), the plan's
dispatch (`row_of`), the conditions (`progressing`) and the reaper (`serves_gang`) read these
rows and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool, GangNodePoolSpec, GangNodePoolStatus
from provisioner.controllers.pool.plan_acquire import plan_acquiring, plan_idle
from provisioner.controllers.pool.plan_held import plan_active, plan_keep_warm
from provisioner.controllers.pool.plan_release import plan_delete, plan_releasing
from provisioner.controllers.pool.steps import LaunchRead, NotFetched, PoolView, StackRead, Step

T = TypeVar("T")
S = TypeVar("S")
L = TypeVar("L")


@dataclass(frozen=True)
class Fetch(Generic[T]):
    """When a pass reads one input of the plan, and so what the view holds of it: `T`."""

    says: str
    wanted: Callable[[GangNodePoolSpec, GangNodePoolStatus], bool]


NOT_READ: Fetch[NotFetched] = Fetch("never", lambda _spec, _status: False)
STACK: Fetch[StackRead] = Fetch("always", lambda _spec, _status: True)
# An Idle pool asks only while unclaimed (its idle stack TTL); a claimed one moves to
# Acquiring first, which asks.
STACK_WHILE_UNCLAIMED: Fetch[StackRead | NotFetched] = Fetch(
    "while unclaimed", lambda spec, _status: spec.claim is None
)
# A claim goes on to a prepare or a launch; a marked launch resumes, claimed or not. An
# unclaimed Acquiring pool with nothing marked goes Idle and needs none of it.
LAUNCH_WHILE_CLAIMED_OR_MARKED: Fetch[LaunchRead | NotFetched] = Fetch(
    "while claimed or a launch is marked",
    lambda spec, status: spec.claim is not None or status.launch_in_progress is not None,
)


@dataclass(frozen=True)
class PhaseRow(Generic[S, L]):
    """A phase's row; its columns are the module docstring's."""

    fresh: bool
    stack: Fetch[S]
    launch: Fetch[L]
    plan: Callable[[PoolView[S, L]], Step]
    progressing: bool
    serves_gang: bool = False

    @property
    def launches(self) -> bool:
        """Whether a pass in the phase may launch: only one that reads the launch facts."""
        return self.launch is not NOT_READ


# Each row is built on its own line, unannotated: mypy infers its types from its fetches and
# checks its planner against them. Built inside the table, whose rows are PhaseRow[Any, Any],
# it would be checked by nothing but tests/unit/test_pool_phases.py.
_IDLE = PhaseRow(
    fresh=False,
    stack=STACK_WHILE_UNCLAIMED,
    launch=NOT_READ,
    plan=plan_idle,
    progressing=False,
)
_ACQUIRING = PhaseRow(
    fresh=True,
    stack=STACK,
    launch=LAUNCH_WHILE_CLAIMED_OR_MARKED,
    plan=plan_acquiring,
    progressing=True,
    serves_gang=True,
)
# Joining and Satisfied share a planner: the set joins, becomes Ready, or breaks.
_JOINING = PhaseRow(
    fresh=False,
    stack=NOT_READ,
    launch=NOT_READ,
    plan=plan_active,
    progressing=True,
    serves_gang=True,
)
_SATISFIED = PhaseRow(
    fresh=False,
    stack=NOT_READ,
    launch=NOT_READ,
    plan=plan_active,
    progressing=False,
    serves_gang=True,
)
_KEEP_WARM = PhaseRow(
    fresh=False, stack=NOT_READ, launch=NOT_READ, plan=plan_keep_warm, progressing=False
)
_RELEASING = PhaseRow(
    fresh=True, stack=STACK, launch=NOT_READ, plan=plan_releasing, progressing=True
)

PHASES: Mapping[Phase, PhaseRow[Any, Any]] = {
    Phase.IDLE: _IDLE,
    Phase.ACQUIRING: _ACQUIRING,
    Phase.JOINING: _JOINING,
    Phase.SATISFIED: _SATISFIED,
    Phase.KEEP_WARM: _KEEP_WARM,
    Phase.RELEASING: _RELEASING,
}
# A pool being deleted, whatever its phase, releases everything and destroys its stack
# (its status says Releasing, whose row the conditions read).
DELETING: PhaseRow[StackRead, NotFetched] = PhaseRow(
    fresh=True, stack=STACK, launch=NOT_READ, plan=plan_delete, progressing=True
)


def row_of(status: GangNodePoolStatus, *, deleting: bool) -> PhaseRow[Any, Any]:
    return DELETING if deleting else PHASES[status.phase]


def _deleting(pool: GangNodePool) -> bool:
    return pool.metadata.deletion_timestamp is not None


def reads_fresh(pool: GangNodePool) -> bool:
    """Whether this pass must list the pool's instances from EC2 rather than the index.

    A pool about to act on its instances (its row says so, or a launch or release is
    marked) acts on what EC2 says now. Every other pool waits for the world to change (a
    joining one for its Nodes, a settled one for a claim, a loss or a timer), and every
    Node or claim event would otherwise cost a listing. What EC2 holds for such a pool
    changes by our own launch or release (the pool reconciler's or the reaper's), each of
    which makes its next read fresh, or by a loss the refresh interval bounds. So a new
    claim on a warm set is admitted on its Nodes being Ready now and on a listing at most
    `instanceIndexRefreshSeconds` old; a listing that misses part of the set is asked again
    (see the reconciler's `_observe`).
    """
    status = pool.status
    if status.launch_in_progress is not None or status.release_in_progress is not None:
        return True
    return row_of(status, deleting=_deleting(pool)).fresh


def needs_stack(spec: GangNodePoolSpec, status: GangNodePoolStatus, *, deleting: bool) -> bool:
    """Whether the pass reads the stack's outputs for a pool in this state (its row's
    `stack`): a pool that is joining, settled or warm does not wait on the Pulumi backend."""
    return row_of(status, deleting=deleting).stack.wanted(spec, status)


def needs_launch_facts(
    spec: GangNodePoolSpec, status: GangNodePoolStatus, *, deleting: bool
) -> bool:
    """Whether the pass reads the launch facts for a pool in this state (its row's `launch`)."""
    return row_of(status, deleting=deleting).launch.wanted(spec, status)


def may_launch(pool: GangNodePool) -> bool:
    """Whether this pass's plan can be a prepare or a launch (a marked launch resumes): the
    passes that read the launch facts, which both are built from."""
    return needs_launch_facts(pool.spec, pool.status, deleting=_deleting(pool))


def progressing(phase: Phase) -> bool:
    return PHASES[phase].progressing


def serves_gang(phase: Phase) -> bool:
    return PHASES[phase].serves_gang
