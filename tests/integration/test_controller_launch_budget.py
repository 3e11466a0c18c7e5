"""A pool short of capacity retries at the account's launch budget, and recovers after EC2
throttles it, on real parts (apiserver, Kueue's Workload objects, the EC2 emulator enforcing
EC2's documented throttling, the in-process controller).

The controller is told the account's RunInstances bucket is larger than the emulator's (an
account whose other tools spend part of it), so its launches meet `RequestLimitExceeded`:
the product's own code takes the throttle (its budget shrinks), keeps retrying the whole
gang as the shrunk budget allows, and launches it once capacity appears. While short, it
retries more often than it counts attempts toward `acquireAttemptsBeforeRetry` (those keep
retryBackoff's schedule): the budget, not the backoff, paces the retries. No time is
asserted.
"""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from tests.integration.controller_harness import GangEnv, eventually

pytestmark = pytest.mark.integration

INSTANCE_TYPE = "m5.large"  # the harness's Jobs' type
ZONE = "us-east-1a"


def _shortfalls(env: GangEnv) -> int:
    requests = env.emulator.client.launch_requests("RunInstances")
    return sum(1 for r in requests if r.get("error") == "InsufficientInstanceCapacity")


def _throttled(env: GangEnv) -> int:
    return int(env.emulator.client.throttling()["throttled"].get("RunInstances", 0))


def test_a_pool_short_of_capacity_retries_at_the_budget_and_recovers_after_a_throttle(
    gang_env_factory: Any,
) -> None:
    env: GangEnv = gang_env_factory(
        # Many attempts are made here; the Workload must keep its quota meanwhile.
        acquireAttemptsBeforeRetry=1000,
        # The whole of a bucket of 20 refilled at 10 a second, where EC2 (the emulator,
        # below) holds 3 refilled at 1: the controller's launches outrun EC2's bucket.
        launchBudget={"share": 1.0, "requestBucket": 20, "requestRefillPerSecond": 10},
    )
    emulator = env.emulator.client
    emulator.set_throttling(mutating={"size": 3, "refill": 1})
    for zone in emulator.state()["regions"]["us-east-1"]["subnets"]:
        emulator.set_capacity(zone, INSTANCE_TYPE, 0)
    pool = "pool-budget"
    workload = env.submit("budget", pool, count=2, **{c.ANN_AVAILABILITY_ZONES: ZONE})

    # EC2 throttles the pool's launches, and the pool keeps launching after that: each
    # shortfall EC2 answers after the first throttle is a retry the shrunk budget allowed.
    eventually(lambda: _throttled(env) >= 1, 120, "EC2 throttling the pool's RunInstances")
    after_throttle = _shortfalls(env)
    eventually(
        lambda: _shortfalls(env) >= after_throttle + 3,
        120,
        lambda: (
            f"retries after the throttle (shortfalls {_shortfalls(env)}, "
            f"{after_throttle} at the throttle)"
        ),
    )
    status = (env.pool(pool) or {}).get("status", {})
    assert status.get("phase") == c.Phase.ACQUIRING, status
    assert env.check(workload)["state"] == c.CheckState.PENDING  # type: ignore[index]
    # Retried as the budget allows, counted as retryBackoff says: more tries than counts.
    assert _shortfalls(env) > status.get("consecutiveShortfalls", 0), status
    assert env.launches() == 0, "a shortfall or a throttle left an instance behind"

    emulator.set_capacity(ZONE, INSTANCE_TYPE, 2)

    env.wait_check(workload, c.CheckState.READY, timeout=180)
    assert len(env.live_instances(pool)) == 2
    # EC2's own bucket again, so the release at teardown is not held up.
    emulator.set_throttling(mutating={"size": 50, "refill": 5})
