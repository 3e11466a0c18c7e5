"""The account's launch budget: one per region, shared by every pool's RunInstances/CreateFleet.

EC2 throttles an account per region with token buckets ("Request throttling for the Amazon
EC2 API", EC2 Developer Guide): each API has a request bucket (one token a call), and
RunInstances also a resource bucket (one token an instance, 1,000 refilled at 2 a second).
A pool waiting on capacity retries as often as those buckets allow, not on a sleep of its
own; the budget holds `launchBudget.share` of them (`LaunchBudgetSettings`) so the other
tools in the account keep the rest.

Every waiting pool gets a fair turn: a pool asks for its launch (`turn`); when both buckets
hold its cost it goes at once, and otherwise the cost is taken now (the buckets go into
debt) and the pool is given the moment the refill pays that debt back. Turns are therefore
handed out in the order pools ask, and a pool that has just tried asks again behind every
pool already waiting: round-robin, with no pool able to take two turns while another
waits. (Go's `rate.Limiter.Reserve` works the same way.) A launch that found no capacity
launched nothing: its instances are given back to the resource bucket (`shortfall`).

A launch may try several subnets, one call each, but a gang whose capacity is there takes
the first. So a turn is paced by the calls a launch is expected to make (`LaunchCost.calls`),
and the further calls it may make (`extra_calls`) are held out of a headroom kept apart from
the paced bucket while it runs: at most the headroom in flight at once, so a burst of
launches that all meet a shortfall still stays inside the bucket. When the launch ends
(`finished`) the calls it made beyond its paced cost are charged: the bucket goes further
into debt and every waiting turn moves later by what they took, as if they had been
reserved before it. (Paying every subnet's token up front, a cold wave of pools with six
subnets each launched one every 2.4 s.) Until the refill has paid for those further calls
they stay out of the headroom, so the paced bucket and the headroom together never let
more calls out than the share and its refill.

The budget backs off only when EC2 says `RequestLimitExceeded` (another tool in the account
spent the rest, or the limits are lower than the settings say): the refill rate shrinks
multiplicatively and recovers along a cubic curve, as the AWS SDKs' adaptive retry mode
does (botocore's `retries/adaptive.py` and `retries/cubic.py`: beta 0.7, scale 0.4, a
floor of 0.5 requests a second), and the buckets are emptied, since EC2 has just said its
own are. The instance bucket's rate shrinks by the same ratio.

Pure: time is passed in (`now`, a datetime), nothing sleeps or reads a clock, and nothing
here calls EC2. One object, made by the composition root (`provisioner.assembly`), is
shared by every pass of the GangNodePool reconciler; a lock makes it safe across workers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from provisioner.api.settings.launch_budget import LaunchBudgetSettings

__all__ = ["Bucket", "Cubic", "LaunchBudget", "LaunchCost", "RegionBudget", "Turn"]

# botocore's adaptive retry mode (`retries/cubic.py`, `retries/adaptive.py`).
CUBIC_BETA: Final = 0.7
CUBIC_SCALE: Final = 0.4
MIN_REQUEST_RATE: Final = 0.5
# A datetime's resolution: a pool that asks at the microsecond its turn comes has it.
RESOLUTION: Final = 1e-6
# The part of the request share held for the further tries of launches under way.
HEADROOM_FRACTION: Final = 0.5
# How soon a pool whose turn came asks again while the headroom is held by other launches:
# a launch holds it for one pass (a few calls to EC2).
HEADROOM_WAIT_SECONDS: Final = 0.5


@dataclass
class Bucket:
    """A token bucket that may go into debt: `tokens` as of `at` (seconds), at most
    `size`, refilled at `rate` a second. A reservation takes its cost at once; the debt
    it leaves says how long until the tokens it took have been refilled."""

    size: float
    rate: float
    tokens: float
    at: float

    def refill(self, now: float) -> None:
        if now > self.at:
            self.tokens = min(self.size, self.tokens + (now - self.at) * self.rate)
            self.at = now

    def reserve(self, cost: float, now: float) -> float:
        """Take `cost` now; the seconds until the bucket has refilled what it owes."""
        self.refill(now)
        self.tokens -= cost
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def give_back(self, cost: float, now: float) -> None:
        self.refill(now)
        self.tokens = min(self.size, self.tokens + cost)

    def empty(self, now: float) -> None:
        self.refill(now)
        self.tokens = min(self.tokens, 0.0)


@dataclass
class Cubic:
    """The request rate after throttling, as botocore's CUBIC calculator computes it:
    `beta * w_max` at the throttle, back to `w_max` after `k` seconds, then above it
    (capped by the configured rate) while EC2 keeps taking the calls."""

    ceiling: float
    w_max: float = 0.0
    last_throttle: float | None = None

    def rate(self, now: float) -> float:
        if self.last_throttle is None:
            return self.ceiling
        k = float((self.w_max * (1 - CUBIC_BETA) / CUBIC_SCALE) ** (1 / 3))
        grown = float(CUBIC_SCALE * (now - self.last_throttle - k) ** 3 + self.w_max)
        return max(min(self.ceiling, grown), min(MIN_REQUEST_RATE, self.ceiling))

    def throttled(self, now: float) -> None:
        self.w_max = self.rate(now)
        self.last_throttle = now


@dataclass(frozen=True)
class LaunchCost:
    """What one launch attempt takes: a request token per call it is expected to make
    (paced), an instance token per instance it asks for, and the further calls it may
    make (one per further subnet it may try), held from the headroom while it runs."""

    calls: int
    instances: int
    extra_calls: int = 0


@dataclass(frozen=True)
class Turn:
    """`go`: launch now. Otherwise ask again `wait` seconds from now (the pool's turn)."""

    go: bool
    wait: float = 0.0


@dataclass
class _Reservation:
    due: float
    cost: LaunchCost


@dataclass
class RegionBudget:
    """One region's buckets, their adaptive rate, and the turns handed out."""

    settings: LaunchBudgetSettings
    start: float
    requests: Bucket = field(init=False)
    instances: Bucket = field(init=False)
    cubic: Cubic = field(init=False)
    waiting: dict[str, _Reservation] = field(default_factory=dict)
    # The extra calls each launch under way may still make, held out of `headroom`.
    held: dict[str, float] = field(default_factory=dict)
    # Further calls made and charged, not yet paid for by the refill: (when paid, calls).
    unpaid: list[tuple[float, float]] = field(default_factory=list)
    headroom: float = field(init=False)
    throttles: int = 0

    def __post_init__(self) -> None:
        s = self.settings
        request_rate = s.request_refill_per_second * s.share
        share = s.request_bucket * s.share
        # Half the share paces turns and half is held for launches' further tries, so the
        # two together never exceed the share.
        self.headroom = share * HEADROOM_FRACTION
        paced = share - self.headroom
        self.requests = Bucket(paced, request_rate, paced, self.start)
        self.instances = Bucket(
            s.instance_bucket * s.share,
            s.instance_refill_per_second * s.share,
            s.instance_bucket * s.share,
            self.start,
        )
        self.cubic = Cubic(ceiling=request_rate)

    def _adapt(self, now: float) -> None:
        """Bring both buckets to `now` at the rates the adaptive curve gives."""
        s = self.settings
        # Refill up to now at the old rates, then set the rates from here on.
        self.requests.refill(now)
        self.instances.refill(now)
        rate = self.cubic.rate(now)
        self.requests.rate = rate
        self.instances.rate = s.instance_refill_per_second * s.share * rate / self.cubic.ceiling

    def _split(self, cost: LaunchCost) -> tuple[float, float]:
        """(paced calls, held calls): further tries beyond the whole headroom are paced."""
        held = min(float(cost.extra_calls), self.headroom)
        return cost.calls + cost.extra_calls - held, held

    def turn(self, pool: str, cost: LaunchCost, now: float) -> Turn:
        waiting = self.waiting.get(pool)
        if waiting is None:
            self._adapt(now)
            paced, _ = self._split(cost)
            wait = max(
                self.requests.reserve(paced, now),
                self.instances.reserve(cost.instances, now),
            )
            waiting = self.waiting[pool] = _Reservation(now + max(wait, 0.0), cost)
        if now < waiting.due - RESOLUTION:
            return Turn(False, waiting.due - now)
        _, extra = self._split(waiting.cost)
        if extra and self._headroom_used(now) + extra > self.headroom + RESOLUTION:
            return Turn(False, HEADROOM_WAIT_SECONDS)  # its turn is kept; the headroom is not free
        del self.waiting[pool]
        if extra:
            self.held[pool] = extra
        return Turn(True)

    def _headroom_used(self, now: float) -> float:
        """The held calls of launches under way, and the further calls made that the
        refill has not yet paid for."""
        self.unpaid = [(due, calls) for due, calls in self.unpaid if due > now + RESOLUTION]
        return sum(self.held.values()) + sum(calls for _, calls in self.unpaid)

    def finished(self, pool: str, cost: LaunchCost, calls: int | None, now: float) -> None:
        """Release the launch's hold and charge the calls it made beyond its paced cost
        (all it may have made when `calls` is unknown), ahead of every turn still to come.
        Until the refill has paid for them they stay out of the headroom."""
        extra = self.held.pop(pool, 0.0)
        paced, _ = self._split(cost)
        over = extra if calls is None else float(calls) - paced
        if over <= 0:
            return
        self._adapt(now)
        self.requests.reserve(over, now)
        ahead = self.requests.tokens
        for waiting in self.waiting.values():
            if waiting.due > now:  # not yet paid: it goes behind the calls just made
                ahead += self._split(waiting.cost)[0]
                waiting.due += over / self.requests.rate
        if ahead < 0:
            self.unpaid.append((now - ahead / self.requests.rate, over))

    def shortfall(self, cost: LaunchCost, now: float) -> None:
        self._adapt(now)
        self.instances.give_back(cost.instances, now)

    def throttled(self, now: float) -> None:
        self._adapt(now)
        self.cubic.throttled(now)
        self.throttles += 1
        self.requests.empty(now)
        self.instances.empty(now)
        self._adapt(now)

    def forget(self, pool: str, now: float) -> None:
        """The pool no longer waits: a turn not yet taken gives back what it reserved (the
        turns behind it keep their moments, so the buckets are never overspent)."""
        waiting = self.waiting.pop(pool, None)
        self.held.pop(pool, None)
        if waiting is not None:
            self._adapt(now)
            self.requests.give_back(self._split(waiting.cost)[0], now)
            self.instances.give_back(waiting.cost.instances, now)


class LaunchBudget:
    """Every region's budget, made on first use; safe to share between worker threads."""

    def __init__(self, settings: LaunchBudgetSettings) -> None:
        self._settings = settings
        self._regions: dict[str, RegionBudget] = {}
        self._lock = threading.Lock()
        self._origin: datetime | None = None

    def _seconds(self, now: datetime) -> float:
        """Seconds since the budget's first use: small numbers keep a float's precision."""
        if self._origin is None:
            self._origin = now
        return (now - self._origin).total_seconds()

    def _region(self, region: str, now: float) -> RegionBudget:
        budget = self._regions.get(region)
        if budget is None:
            budget = self._regions[region] = RegionBudget(self._settings, now)
        return budget

    def turn(self, region: str, pool: str, cost: LaunchCost, now: datetime) -> Turn:
        """Whether `pool` may launch now, or in how many seconds its turn comes."""
        with self._lock:
            t = self._seconds(now)
            return self._region(region, t).turn(pool, cost, t)

    def finished(
        self, region: str, pool: str, cost: LaunchCost, calls: int | None, now: datetime
    ) -> None:
        """A launch given its turn ended having made `calls` calls (None: not known)."""
        with self._lock:
            t = self._seconds(now)
            self._region(region, t).finished(pool, cost, calls, t)

    def shortfall(self, region: str, cost: LaunchCost, now: datetime) -> None:
        """A launch found no capacity: its instances were not launched; give them back."""
        with self._lock:
            t = self._seconds(now)
            self._region(region, t).shortfall(cost, t)

    def throttled(self, region: str, now: datetime) -> None:
        """EC2 answered RequestLimitExceeded: shrink the rate, empty the buckets."""
        with self._lock:
            t = self._seconds(now)
            self._region(region, t).throttled(t)

    def forget(self, pool: str, now: datetime) -> None:
        """A pool that no longer waits (its plan changed, or it is gone) gives up its turn
        and what the turn reserved."""
        with self._lock:
            t = self._seconds(now)
            for budget in self._regions.values():
                budget.forget(pool, t)

    def rate(self, region: str, now: datetime) -> float:
        """The region's request rate now (requests a second), for tests and the bench."""
        with self._lock:
            t = self._seconds(now)
            return self._region(region, t).cubic.rate(t)

    def throttles(self, region: str) -> int:
        """How many times EC2 throttled a launch in `region` (each shrank the rate)."""
        with self._lock:
            budget = self._regions.get(region)
            return 0 if budget is None else budget.throttles
