"""The account's launch budget (`controllers.launch_budget`), on an injected clock.

Pools waiting on capacity are replayed against the budget in virtual time: each asks for a
turn, launches when given one, meets a shortfall and asks again at once. Two checkers read
the launches they made: that EC2's buckets (the budget's share of them) were never exceeded,
and that turns went round-robin. Each checker is also fed, once, a run that breaks it.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from provisioner.api.settings import LaunchBudgetSettings
from provisioner.controllers.launch_budget import (
    CUBIC_BETA,
    HEADROOM_FRACTION,
    HEADROOM_WAIT_SECONDS,
    Bucket,
    Cubic,
    LaunchBudget,
    LaunchCost,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)
REGION = "us-east-1"
DEFAULTS = LaunchBudgetSettings()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass(frozen=True)
class Launch:
    t: float
    pool: str
    cost: LaunchCost
    made: int | None = None  # the calls it sent; its paced cost unless said

    @property
    def calls(self) -> int:
        return self.cost.calls if self.made is None else self.made


def replay(
    budget: LaunchBudget,
    pools: int,
    seconds: float,
    cost: LaunchCost,
    shortfall: bool = True,
    made: int | None = None,
    duration: float = 0.0,
) -> list[Launch]:
    """Every pool asks at 0; a pool given its turn launches, sending `made` calls at once
    (its paced cost unless said), and ends `duration` later: it tells the budget the calls
    it made, meets a shortfall (its instances are given back) and asks again at once. One
    told to wait asks when told. At one instant, launches end before pools ask. As the
    controller does (`launch_turns`), a pool that met a shortfall is paced by every call
    its cost may make from then on."""
    end, ask = 0, 1
    swept = LaunchCost(cost.calls + cost.extra_calls, cost.instances)
    short: set[str] = set()
    events = [(0.0, ask, i, f"pool-{i}") for i in range(pools)]
    heapq.heapify(events)
    launches: list[Launch] = []
    seq = pools
    while events:
        t, kind, _, pool = heapq.heappop(events)
        if t > seconds:
            break
        seq += 1
        mine = swept if pool in short else cost
        if kind == end:
            budget.finished(REGION, pool, mine, made, at(t))
            if shortfall:
                budget.shortfall(REGION, mine, at(t))
                short.add(pool)
            heapq.heappush(events, (t, ask, seq, pool))
            continue
        turn = budget.turn(REGION, pool, mine, at(t))
        if turn.go:
            launches.append(Launch(t, pool, mine, made))
            heapq.heappush(events, (t + duration, end, seq, pool))
        else:
            assert turn.wait > 0
            heapq.heappush(events, (t + turn.wait, ask, seq, pool))
    return launches


def within(launches: list[Launch], size: float, rate: float, instances: bool = False) -> bool:
    """No window from the start takes more than the bucket held plus what it refilled."""
    spent = 0.0
    for launch in launches:
        spent += launch.cost.instances if instances else launch.calls
        if spent > size + rate * launch.t + 1e-6:
            return False
    return True


def round_robin(launches: list[Launch], pools: int) -> bool:
    """Among pools that all keep waiting, each turn of a pool comes only after every other
    pool has had as many: in any `pools` launches in a row, no pool appears twice."""
    names = [launch.pool for launch in launches]
    return all(
        len(set(names[i : i + pools])) == len(names[i : i + pools])
        for i in range(len(names) - pools + 1)
    )


SHARE = DEFAULTS.share
REQ_SIZE, REQ_RATE = DEFAULTS.request_bucket * SHARE, DEFAULTS.request_refill_per_second * SHARE
# The part of the share that paces turns; the rest is held for launches' further tries.
PACED_SIZE = REQ_SIZE * (1 - HEADROOM_FRACTION)
INST_SIZE, INST_RATE = (
    DEFAULTS.instance_bucket * SHARE,
    DEFAULTS.instance_refill_per_second * SHARE,
)


@pytest.mark.parametrize(
    ("pools", "cost", "shortfall"),
    [
        (1, LaunchCost(1, 4), True),
        (10, LaunchCost(1, 4), True),
        (100, LaunchCost(1, 4), True),
        (7, LaunchCost(3, 8), True),  # a sweep over three subnets
        (10, LaunchCost(1, 64), False),  # launches that succeed spend the instance bucket
    ],
)
def test_waiting_pools_stay_inside_the_buckets_and_take_turns(
    pools: int, cost: LaunchCost, shortfall: bool
) -> None:
    launches = replay(LaunchBudget(DEFAULTS), pools, 600.0, cost, shortfall)
    assert within(launches, REQ_SIZE, REQ_RATE)
    if not shortfall:  # a shortfall gives its instances back
        assert within(launches, INST_SIZE, INST_RATE, instances=True)
    assert round_robin(launches, pools)
    # As often as the budget allows: the bucket and its refill, nearly all spent.
    spent = sum(launch.cost.calls for launch in launches)
    if shortfall:
        assert spent >= PACED_SIZE + REQ_RATE * 600.0 - cost.calls * pools - 1


def test_a_fresh_launch_is_paced_by_the_one_call_it_makes() -> None:
    """A gang whose capacity is there takes its first subnet: a cold wave of 200 pools
    with six subnets each launches at the refill's pace, not a sixth of it."""
    six_subnets = LaunchCost(1, 2, extra_calls=5)
    launches = replay(LaunchBudget(DEFAULTS), 200, 60.0, six_subnets, False, 1, duration=0.2)
    assert within(launches, REQ_SIZE, REQ_RATE)
    assert within(launches, INST_SIZE, INST_RATE, instances=True)
    assert len(launches) >= PACED_SIZE + REQ_RATE * 60.0 - 1
    paced_whole = replay(LaunchBudget(DEFAULTS), 200, 60.0, LaunchCost(6, 2), False, 1)
    assert len(paced_whole) * 5 < len(launches)


@pytest.mark.parametrize(("pools", "duration"), [(1, 0.3), (10, 0.3), (100, 0.3), (100, 5.0)])
def test_launches_that_try_every_subnet_stay_inside_the_share(pools: int, duration: float) -> None:
    """Fresh pools that all meet a shortfall send every call their cost may: the hold
    keeps each burst inside the share, and what they sent moves every later turn."""
    six_subnets = LaunchCost(1, 4, extra_calls=5)
    launches = replay(LaunchBudget(DEFAULTS), pools, 600.0, six_subnets, True, 6, duration)
    assert within(launches, REQ_SIZE, REQ_RATE)
    spent = sum(launch.calls for launch in launches)
    assert spent >= REQ_RATE * 600.0 * 0.9  # still as often as the budget allows


def test_the_share_is_exceeded_by_launches_that_send_more_than_they_hold() -> None:
    """The world the hold prevents: launches that say they make one call and make six."""
    says_one = LaunchCost(1, 4)
    launches = replay(LaunchBudget(DEFAULTS), 100, 60.0, says_one, True, 6, duration=0.3)
    assert not within(launches, REQ_SIZE, REQ_RATE)


def test_the_calls_a_launch_made_move_the_turns_behind_it() -> None:
    budget = LaunchBudget(LaunchBudgetSettings(request_bucket=4, share=1.0))  # 2 paced, 2 held
    three_subnets = LaunchCost(1, 1, extra_calls=2)
    assert budget.turn(REGION, "a", three_subnets, at(0)).go
    budget.finished(REGION, "a", three_subnets, 1, at(0))  # its first subnet took it
    assert budget.turn(REGION, "b", three_subnets, at(0)).go
    assert budget.turn(REGION, "c", three_subnets, at(0)).wait == pytest.approx(0.2)
    # b tried all three subnets: c's turn comes once its two further calls are refilled.
    budget.finished(REGION, "b", three_subnets, 3, at(0.1))
    assert budget.turn(REGION, "c", three_subnets, at(0.2)).wait == pytest.approx(0.4)
    # A launch that made its one call moves nothing; nor does the pass ending it again.
    assert budget.turn(REGION, "c", three_subnets, at(0.6)).go
    budget.finished(REGION, "c", three_subnets, 1, at(0.7))
    budget.finished(REGION, "c", three_subnets, None, at(0.7))
    assert budget.turn(REGION, "d", three_subnets, at(0.7)).wait == pytest.approx(0.1)


def test_a_turn_waits_while_the_headroom_is_held() -> None:
    budget = LaunchBudget(LaunchBudgetSettings(request_bucket=8, share=1.0))  # 4 paced, 4 held
    three_subnets = LaunchCost(1, 1, extra_calls=2)
    assert budget.turn(REGION, "a", three_subnets, at(0)).go
    assert budget.turn(REGION, "b", three_subnets, at(0)).go
    told = budget.turn(REGION, "c", three_subnets, at(0))
    assert not told.go and told.wait == pytest.approx(HEADROOM_WAIT_SECONDS)
    budget.finished(REGION, "a", three_subnets, 1, at(0.1))
    assert budget.turn(REGION, "c", three_subnets, at(0.5)).go


def test_the_checkers_fail_on_a_run_that_breaks_them() -> None:
    one = LaunchCost(1, 4)
    burst = [Launch(0.0, f"pool-{i % 3}", one) for i in range(int(REQ_SIZE) + 1)]
    assert not within(burst, REQ_SIZE, REQ_RATE)
    unfair = [Launch(float(i), "pool-0" if i < 2 else "pool-1", one) for i in range(4)]
    assert not round_robin(unfair, 2)


@pytest.mark.parametrize(
    ("tokens", "cost", "wait", "left"),
    [
        (10.0, 1.0, 0.0, 9.0),
        (1.0, 1.0, 0.0, 0.0),
        (0.0, 1.0, 0.4, -1.0),  # in debt: the refill (2.5/s) pays it back in 0.4 s
        (-2.5, 2.5, 2.0, -5.0),
    ],
)
def test_a_reservation_takes_its_cost_and_says_when_it_is_paid(
    tokens: float, cost: float, wait: float, left: float
) -> None:
    bucket = Bucket(size=25.0, rate=2.5, tokens=tokens, at=0.0)
    assert bucket.reserve(cost, 0.0) == pytest.approx(wait)
    assert bucket.tokens == pytest.approx(left)


def test_a_bucket_never_holds_more_than_its_size() -> None:
    bucket = Bucket(size=25.0, rate=2.5, tokens=0.0, at=0.0)
    bucket.refill(3600.0)
    bucket.give_back(10.0, 3600.0)
    assert bucket.tokens == 25.0


def test_a_waiting_pool_keeps_its_turn_and_is_told_how_long() -> None:
    budget = LaunchBudget(LaunchBudgetSettings(request_bucket=2, share=1.0))  # 1 paced
    one = LaunchCost(1, 1)
    assert budget.turn(REGION, "a", one, at(0)).go
    told = budget.turn(REGION, "b", one, at(0))
    assert not told.go and told.wait == pytest.approx(0.2)  # 5 a second
    # Asking early changes nothing; at its time it goes, and c comes after it.
    assert budget.turn(REGION, "b", one, at(0.1)).wait == pytest.approx(0.1)
    assert budget.turn(REGION, "c", one, at(0.1)).wait == pytest.approx(0.3)
    assert budget.turn(REGION, "b", one, at(0.2)).go
    # Regions have budgets of their own.
    assert budget.turn("eu-west-1", "d", one, at(0.2)).go


def test_a_forgotten_pool_gives_up_its_turn_and_what_it_reserved() -> None:
    budget = LaunchBudget(LaunchBudgetSettings(request_bucket=2, share=1.0))  # 1 paced
    one = LaunchCost(1, 1)
    budget.turn(REGION, "a", one, at(0))
    assert budget.turn(REGION, "b", one, at(0)).wait == pytest.approx(0.2)
    budget.forget("b", at(0))
    # The token b reserved is back: c takes b's place, not the place behind it.
    assert budget.turn(REGION, "c", one, at(0)).wait == pytest.approx(0.2)
    # b asks again: a new turn, behind c.
    assert budget.turn(REGION, "b", one, at(0)).wait == pytest.approx(0.4)


@pytest.mark.parametrize("seed", range(5))
def test_turns_given_back_never_let_more_calls_out_than_the_bucket(seed: int) -> None:
    """Every second, 30 pools ask for a one-call turn and a random half give theirs up
    before it comes (a warm set claimed before its keep-warm tag is written): the turns
    that go stay inside the paced bucket and its refill, each goes when it was told, and
    the turns given up do not hold the rest back (kept, they would: 12-16 went, not 280)."""
    rng = random.Random(seed)
    budget = LaunchBudget(DEFAULTS)
    one = LaunchCost(1, 0)
    waiting: dict[str, float] = {}
    went: list[Launch] = []
    for second in range(120):
        for i in range(30):
            pool = f"pool-{second}-{i}"
            turn = budget.turn(REGION, pool, one, at(second))
            if turn.go:
                went.append(Launch(float(second), pool, one))
            else:
                waiting[pool] = second + turn.wait
        for pool in [p for p in waiting if rng.random() < 0.5]:
            budget.forget(pool, at(second))
            del waiting[pool]
        for pool, due in sorted(waiting.items(), key=lambda item: item[1]):
            if due <= second + 1:
                assert budget.turn(REGION, pool, one, at(due)).go
                went.append(Launch(due, pool, one))
                del waiting[pool]
    went.sort(key=lambda launch: launch.t)
    assert within(went, PACED_SIZE, REQ_RATE)
    # Most of the refill is used: a hole a turn given up leaves mid-queue stays a hole.
    assert len(went) >= 0.8 * (PACED_SIZE + REQ_RATE * 119)


def test_request_limit_exceeded_shrinks_the_rate_and_it_recovers() -> None:
    budget = LaunchBudget(DEFAULTS)
    before = budget.rate(REGION, at(0))
    budget.throttled(REGION, at(10))
    assert budget.rate(REGION, at(10)) == pytest.approx(before * CUBIC_BETA)
    budget.throttled(REGION, at(10))
    assert budget.rate(REGION, at(10)) == pytest.approx(before * CUBIC_BETA**2)
    assert budget.rate(REGION, at(11)) < before
    assert budget.rate(REGION, at(20)) == pytest.approx(before)
    # And the next pool waits: the buckets were emptied (EC2 said its own were).
    told = budget.turn(REGION, "a", LaunchCost(1, 1), at(10))
    assert not told.go


@pytest.mark.parametrize(
    ("w_max", "since", "expected"),
    [
        (2.5, 0.0, 2.5 * CUBIC_BETA),
        (2.5, 1.2331, 2.5),  # k = cbrt(w_max * (1 - beta) / 0.4)
        (2.5, 60.0, 2.5),  # capped at the configured rate
        (0.6, 0.0, 0.5),  # floored, as botocore's adaptive mode floors it
    ],
)
def test_the_cubic_curve_is_botocores(w_max: float, since: float, expected: float) -> None:
    cubic = Cubic(ceiling=2.5, w_max=w_max, last_throttle=100.0)
    assert cubic.rate(100.0 + since) == pytest.approx(expected, abs=1e-3)


def test_after_a_throttle_pools_launch_at_the_recovering_rate_and_still_in_turn() -> None:
    cost = LaunchCost(1, 4)
    throttled = LaunchBudget(DEFAULTS)
    throttled.throttled(REGION, at(0))
    launches = replay(throttled, 10, 30.0, cost)
    # The buckets were emptied: nothing but the refill, at most the configured rate.
    assert within(launches, 1.0, REQ_RATE)
    assert len(launches) < len(replay(LaunchBudget(DEFAULTS), 10, 30.0, cost))
    assert round_robin(launches, 10)
