"""A pool's launches under the account's launch budget (`controllers.launch_budget`).

The GangNodePool reconciler asks `ask` before a planned launch runs: the pool launches when
the budget gives it its turn, and otherwise waits for it (nothing is written: the next pass
plans again). `settle` tells the budget what the launch met: a shortfall gives back its
instances (EC2 launched none), and `RequestLimitExceeded` shrinks the budget. So a pool
waiting on capacity retries at the budget's pace, round-robin with every other waiting pool,
and not on a backoff of its own (`outcomes`: a shortfall and a throttle look again at once).
"""

from __future__ import annotations

from provisioner.api.constants import FailureKind
from provisioner.controllers.launch_budget import LaunchBudget, LaunchCost, Turn
from provisioner.controllers.pool.steps import ActionResult, AnyView, LaunchRead

_SHORTFALLS = frozenset({FailureKind.CAPACITY, FailureKind.MALFORMED})


def launch_cost(view: AnyView) -> LaunchCost:
    """A request token per call the launch may make (one ClientToken per try) and an
    instance token per instance of the gang."""
    tokens = view.launch.tokens if isinstance(view.launch, LaunchRead) else ()
    return LaunchCost(calls=max(1, len(tokens)), instances=view.spec.count)


def ask(budget: LaunchBudget, view: AnyView) -> Turn:
    return budget.turn(view.spec.region, view.name, launch_cost(view), view.now)


def settle(budget: LaunchBudget, view: AnyView, result: ActionResult) -> None:
    if result.throttled:
        budget.throttled(view.spec.region, view.now)
    elif result.failure in _SHORTFALLS and not result.unreleased_ids:
        budget.shortfall(view.spec.region, launch_cost(view), view.now)
