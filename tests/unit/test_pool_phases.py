"""The pool's phase table (`controllers/pool/phases.py`): one row per phase, saying what a
pass fetches, what plans the phase, and whether it progresses or may launch.

The rows agree with the four sets they replaced (the reconciler's acting phases, the plan's
stack phases, `may_launch`, the conditions' progressing phases), state by state; each row's
planner takes the view its fetches give; and a planner that reads what its row does not
fetch fails `mypy --strict`, shown on a snippet checked here (beside one that passes).
"""

from __future__ import annotations

import itertools
import textwrap
import typing
from pathlib import Path
from typing import Any

import pytest
from mypy import api as mypy_api

from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.controllers.pool import phases
from provisioner.controllers.pool.phases import (
    DELETING,
    PHASES,
    Fetch,
    PhaseRow,
    may_launch,
    needs_stack,
    progressing,
    reads_fresh,
    serves_gang,
)
from tests.support.pools import claim, pool, pool_spec

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

# What the sets said before the table (reconciler.py, plan.py, conditions.py).
OLD_ACTING_PHASES = frozenset({Phase.ACQUIRING, Phase.RELEASING})
OLD_STACK_PHASES = frozenset({Phase.ACQUIRING, Phase.RELEASING})
OLD_PROGRESSING_PHASES = frozenset({Phase.ACQUIRING, Phase.JOINING, Phase.RELEASING})


def old_reads_fresh(p: GangNodePool) -> bool:
    status = p.status
    if p.metadata.deletion_timestamp is not None:
        return True
    if status.launch_in_progress is not None or status.release_in_progress is not None:
        return True
    return status.phase in OLD_ACTING_PHASES


def old_needs_stack(p: GangNodePool) -> bool:
    if p.metadata.deletion_timestamp is not None or p.status.phase in OLD_STACK_PHASES:
        return True
    return p.status.phase == Phase.IDLE and p.spec.claim is None


def old_may_launch(p: GangNodePool) -> bool:
    status = p.status
    return (
        status.phase == Phase.ACQUIRING
        and p.metadata.deletion_timestamp is None
        and (p.spec.claim is not None or status.launch_in_progress is not None)
    )


LAUNCH_MARKER = {
    "clientToken": "pool-uid/3",
    "mode": "runinstances",
    "group": "gen-3",
    "startedAt": "2026-11-29T12:00:00Z",
}
RELEASE_MARKER = {
    "startedAt": "2026-11-29T12:00:00Z",
    "reason": "Released",
    "instanceIds": ["i-00000000000000001"],
}


def a_pool(
    phase: Phase, claimed: bool, launching: bool, releasing: bool, deleting: bool
) -> GangNodePool:
    status: dict[str, Any] = {"phase": phase}
    if launching:
        status["launchInProgress"] = LAUNCH_MARKER
    if releasing:
        status["releaseInProgress"] = RELEASE_MARKER
    extra = {"deletion_timestamp": "2026-11-29T12:00:00Z"} if deleting else {}
    spec = pool_spec(claim=claim() if claimed else None)
    return GangNodePool.from_dict(pool(spec=spec, status=status, **extra))


STATES = [
    a_pool(phase, *flags)
    for phase in Phase
    for flags in itertools.product([False, True], repeat=4)  # claimed, launching, ...
]


def test_every_phase_has_exactly_one_row() -> None:
    assert list(PHASES) == list(Phase)
    assert len({id(row) for row in PHASES.values()}) == len(Phase)


# (phase, lists EC2 fresh, reads the stack always, may launch, progressing): the old sets.
FLAGS = [
    (
        phase,
        phase in OLD_ACTING_PHASES,
        phase in OLD_STACK_PHASES,
        phase == Phase.ACQUIRING,
        phase in OLD_PROGRESSING_PHASES,
    )
    for phase in Phase
]


@pytest.mark.parametrize(("phase", "fresh", "stack", "launches", "progresses"), FLAGS)
def test_each_rows_flags_say_what_the_old_sets_said(
    phase: Phase, fresh: bool, stack: bool, launches: bool, progresses: bool
) -> None:
    row = PHASES[phase]
    assert row.fresh is fresh
    assert (row.stack is phases.STACK) is stack
    assert row.launches is launches
    assert row.progressing is progresses
    assert progressing(phase) is progresses


@pytest.mark.parametrize("p", STATES, ids=lambda p: _state_id(p))
def test_the_pass_fetches_what_it_did_before_the_table(p: GangNodePool) -> None:
    deleting = p.metadata.deletion_timestamp is not None
    assert reads_fresh(p) is old_reads_fresh(p)
    assert needs_stack(p.spec, p.status, deleting=deleting) is old_needs_stack(p)
    assert may_launch(p) is old_may_launch(p)


def _state_id(p: GangNodePool) -> str:
    s = p.status
    flags = [
        "claimed" if p.spec.claim else "unclaimed",
        *(["launching"] if s.launch_in_progress else []),
        *(["releasing"] if s.release_in_progress else []),
        *(["deleting"] if p.metadata.deletion_timestamp else []),
    ]
    return "-".join([s.phase.value, *flags])


def _fetched_type(fetch: Fetch[Any]) -> object:
    """What a view holds of an input read by `fetch`: the `T` of its `Fetch[T]` annotation."""
    hints = typing.get_type_hints(phases)
    (name,) = [n for n, hint in hints.items() if getattr(phases, n, None) is fetch]
    return typing.get_args(hints[name])[0]


ROWS = [*((phase.value, row) for phase, row in PHASES.items()), ("deleting", DELETING)]


@pytest.mark.parametrize("row", [r for _, r in ROWS], ids=[n for n, _ in ROWS])
def test_each_planner_takes_the_view_its_row_fetches(row: PhaseRow[Any, Any]) -> None:
    # mypy checks this where a row is built; this holds it for a row built where mypy
    # cannot see its type (inside the table, whose rows are PhaseRow[Any, Any]).
    view = typing.get_type_hints(row.plan)["view"]
    assert typing.get_args(view) == (_fetched_type(row.stack), _fetched_type(row.launch))


BAD = """
from provisioner.controllers.pool.phases import NOT_READ, PhaseRow
from provisioner.controllers.pool.plan_held import plan_active
from provisioner.controllers.pool.plan_release import plan_releasing
from provisioner.controllers.pool.steps import LaunchRead, NotFetched, PoolView, StackRead, Step


def plan_joining(view: PoolView[NotFetched, NotFetched]) -> Step:
    if view.stack.prepared:
        raise AssertionError("Joining's row does not read the stack")
    return plan_active(view)


def plan_acquiring(view: PoolView[StackRead, LaunchRead | NotFetched]) -> Step:
    if view.launch.capacity_block is not None:
        raise AssertionError("read only while claimed or marked")
    return plan_joining(view)


JOINING = PhaseRow(
    fresh=False, stack=NOT_READ, launch=NOT_READ, plan=plan_releasing, progressing=True
)
"""

GOOD = """
from provisioner.controllers.pool.phases import NOT_READ, STACK, PhaseRow
from provisioner.controllers.pool.plan_held import plan_active
from provisioner.controllers.pool.plan_release import plan_releasing
from provisioner.controllers.pool.steps import LaunchRead, NotFetched, PoolView, StackRead, Step


def plan_joining(view: PoolView[NotFetched, NotFetched]) -> Step:
    return plan_active(view)


def plan_releasing_too(view: PoolView[StackRead, NotFetched]) -> Step:
    if view.stack.prepared:
        return plan_releasing(view)
    return plan_releasing(view)


def plan_acquiring(view: PoolView[StackRead, LaunchRead | NotFetched]) -> Step:
    read = view.launch.capacity_block if isinstance(view.launch, LaunchRead) else None
    if read is not None and view.stack.prepared:
        raise AssertionError("a planner may read what its row fetches")
    raise NotImplementedError


JOINING = PhaseRow(
    fresh=False, stack=NOT_READ, launch=NOT_READ, plan=plan_joining, progressing=True
)
RELEASING = PhaseRow(
    fresh=True, stack=STACK, launch=NOT_READ, plan=plan_releasing_too, progressing=True
)
"""

# What mypy --strict says of BAD: each read of an input the row does not fetch, and the row
# that pairs a planner with fetches that do not give its view.
EXPECTED = [
    'bad.py:8: error: "NotFetched" has no attribute "prepared"  [attr-defined]',
    'bad.py:14: error: Item "NotFetched" of "LaunchRead | NotFetched" has no attribute '
    '"capacity_block"  [union-attr]',
    'bad.py:16: error: Argument 1 to "plan_joining" has incompatible type '
    '"PoolView[StackRead, LaunchRead | NotFetched]"; expected "PoolView[NotFetched, NotFetched]"'
    "  [arg-type]",
    'bad.py:20: error: Argument "plan" to "PhaseRow" has incompatible type '
    '"Callable[[PoolView[StackRead, NotFetched]], Step]"; expected '
    '"Callable[[PoolView[NotFetched, NotFetched]], Step]"  [arg-type]',
]


def test_a_planner_that_reads_what_its_row_does_not_fetch_fails_type_checking(
    tmp_path: Path,
) -> None:
    (tmp_path / "bad.py").write_text(textwrap.dedent(BAD).lstrip())
    (tmp_path / "good.py").write_text(textwrap.dedent(GOOD).lstrip())
    out, err, _ = mypy_api.run(
        [
            "--strict",
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--no-error-summary",
            "--hide-error-context",
            str(tmp_path / "bad.py"),
            str(tmp_path / "good.py"),
        ]
    )
    said = [line.removeprefix(f"{tmp_path}/") for line in out.splitlines()]
    assert said == EXPECTED, out + err


def test_the_phases_that_serve_a_gang_are_those_of_its_set_from_launch_to_ready() -> None:
    """The reaper takes no set of these for an expired keep-warm tag (`reaper`): a claim's
    end may not be seen yet, and the tag, not cleared by a claim, holds a window before."""
    assert {p for p in Phase if serves_gang(p)} == {
        Phase.ACQUIRING,
        Phase.JOINING,
        Phase.SATISFIED,
    }
