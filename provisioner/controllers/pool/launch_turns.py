"""A pool's launches under the account's launch budget (`controllers.launch_budget`).

The GangNodePool reconciler asks `ask` before a planned launch runs: the pool launches when
the budget gives it its turn, and otherwise waits for it (nothing is written: the next pass
plans again). `settle` tells the budget what the launch met: the calls it made (a turn is
paced by one call, the first subnet's, unless the pool has met a shortfall since its last
set, when every subnet is expected to be tried), a shortfall gives back its instances (EC2
launched none), and `RequestLimitExceeded` shrinks the budget. `abandon` ends every pass
given a turn: after `settle` it does nothing; a pass that failed before its launch was
settled gives its hold back, charged as if every call was made (it cannot say how many
were). So a pool waiting on capacity retries at the budget's pace, round-robin with every
other waiting pool, and not on a backoff of its own (`outcomes`: a shortfall and a throttle
look again at once).

The keep-warm tag is written the same way, at its own budget (`tag_turn`, `tag_settled`):
CreateTags has a request bucket of its own, a mutating action's, of which the controller
takes the same share. A pool whose plan no longer tags gives its turn back (`no_tag`).
"""

from __future__ import annotations

from provisioner.api.constants import FailureKind
from provisioner.controllers.launch_budget import LaunchBudget, LaunchCost, Turn
from provisioner.controllers.pool.steps import ActionResult, AnyView, LaunchRead

_SHORTFALLS = frozenset({FailureKind.CAPACITY, FailureKind.MALFORMED})
# One CreateTags call names every instance of the set.
TAG_COST = LaunchCost(calls=1, instances=0)


def launch_cost(view: AnyView) -> LaunchCost:
    """An instance token per instance of the gang, and a request token per call the launch
    may make (one ClientToken per try): paced, the first try's alone while capacity is
    expected (a fresh launch takes the first subnet), every try's once the pool has met a
    shortfall (each turn then sweeps its subnets); the rest held while it runs."""
    tokens = view.launch.tokens if isinstance(view.launch, LaunchRead) else ()
    tries = max(1, len(tokens))
    paced = tries if view.status.consecutive_shortfalls else 1
    return LaunchCost(calls=paced, instances=view.spec.count, extra_calls=tries - paced)


def ask(budget: LaunchBudget, view: AnyView) -> Turn:
    return budget.turn(view.spec.region, view.name, launch_cost(view), view.now)


def settle(budget: LaunchBudget, view: AnyView, result: ActionResult) -> None:
    cost = launch_cost(view)
    budget.finished(view.spec.region, view.name, cost, result.calls, view.now)
    if result.throttled:
        budget.throttled(view.spec.region, view.now)
    elif result.failure in _SHORTFALLS and not result.unreleased_ids:
        budget.shortfall(view.spec.region, cost, view.now)


def abandon(budget: LaunchBudget, view: AnyView) -> None:
    budget.finished(view.spec.region, view.name, launch_cost(view), None, view.now)


def tag_turn(budget: LaunchBudget, view: AnyView) -> Turn:
    return budget.turn(view.spec.region, view.name, TAG_COST, view.now)


def tag_settled(budget: LaunchBudget, view: AnyView, result: ActionResult) -> None:
    if result.throttled:
        budget.throttled(view.spec.region, view.now)


def no_tag(budget: LaunchBudget, view: AnyView) -> None:
    budget.forget(view.name, view.now)
