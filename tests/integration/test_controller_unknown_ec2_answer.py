"""EC2 answers the controller must not sit on, on real parts (apiserver, Kueue's Workload
objects, the EC2 emulator's fault switches, the in-process controller).

A code the catalogue lacks, answered to every launch (RunInstances, or CreateFleet in fleet
mode): the pool counts each answer, and after ``unknownErrorAttemptsBeforeRetry`` of them the
Workload's check goes to Retry naming the code, with an Event on the Workload saying so.
Nothing is launched meanwhile. ``OptInRequired`` (an account state) tells the user the account
must opt in, not to fix the pool's shape.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from kubernetes import client as k8s

from provisioner.api import constants as c
from tests.integration.controller_harness import GangEnv, eventually

pytestmark = pytest.mark.integration

# No row of the catalogue names it (EC2's error-code list has no such code either).
NEVER_SEEN = "InvalidFrobnicatorState"
ATTEMPTS = 2  # unknownErrorAttemptsBeforeRetry, small so the test sees it within seconds
LAUNCH_CALL = {c.MODE_RUNINSTANCES: "RunInstances", c.MODE_FLEET: "CreateFleet"}


def _workload_events(env: GangEnv, workload: str, reason: str) -> list[str]:
    core = k8s.CoreV1Api(env.custom.api_client)
    selector = f"involvedObject.name={workload},reason={reason}"
    found = core.list_namespaced_event(env.namespace, field_selector=selector)
    return [e.message for e in found.items]


def _pool_events(env: GangEnv, pool: str, reason: str) -> list[str]:
    uid = (env.pool(pool) or {})["metadata"]["uid"]
    core = k8s.CoreV1Api(env.custom.api_client)
    selector = f"involvedObject.uid={uid},reason={reason}"
    found = core.list_namespaced_event("default", field_selector=selector)
    return [e.message for e in found.items]


def _refused_launches(env: GangEnv, action: str, code: str) -> int:
    consumed = env.emulator.client.consumed()
    return sum(1 for x in consumed if x.get("action") == action and x.get("code") == code)


@pytest.mark.parametrize("mode", [c.MODE_RUNINSTANCES, c.MODE_FLEET])
def test_a_code_the_catalogue_lacks_ends_in_retry_after_the_set_attempts(
    gang_env_factory: Any, mode: str
) -> None:
    env: GangEnv = gang_env_factory(unknownErrorAttemptsBeforeRetry=ATTEMPTS)
    action = LAUNCH_CALL[mode]
    # The controller's calls alone take the fault (controller_harness: the test and the node
    # simulator sign with keys of their own); more than the controller can spend before Retry.
    env.emulator.client.inject_fault(
        action,
        NEVER_SEEN,
        message="The frobnicator is in a state EC2 never documented.",
        count=50,
        client=os.environ["AWS_ACCESS_KEY_ID"],
    )
    pool = f"pool-unknown-{mode}"
    workload = env.submit("unknown", pool, count=2, **{c.ANN_MODE: mode})

    check = env.wait_check(workload, c.CheckState.RETRY, timeout=120)
    env.emulator.client.clear_faults()  # the pool's release at teardown must not meet it

    assert NEVER_SEEN in check["message"], check
    assert "does not know" in check["message"], check
    assert _refused_launches(env, action, NEVER_SEEN) >= ATTEMPTS
    status = (env.pool(pool) or {}).get("status", {})
    assert status.get("consecutiveUnknownErrors", 0) >= ATTEMPTS, status
    last = status.get("lastError", {})
    assert last.get("kind") == c.FailureKind.UNKNOWN and NEVER_SEEN in last["message"], status
    # Each answer is an Event on the pool, counted; the Retry is one on the Workload.
    attempts = eventually(
        lambda: _pool_events(env, pool, c.EventReason.UNKNOWN_AWS_ERROR),
        30,
        "the pool's UnknownAwsError Events",
    )
    assert any(m.startswith(f"Attempt {ATTEMPTS}:") and NEVER_SEEN in m for m in attempts), attempts
    retried = eventually(
        lambda: _workload_events(env, workload, c.EventReason.UNKNOWN_AWS_ERROR),
        30,
        "the Workload's UnknownAwsError Event",
    )
    assert any(NEVER_SEEN in m for m in retried), retried
    assert env.launches() == 0, "an unknown answer left instances behind"


def test_opt_in_required_says_the_account_must_opt_in(gang_env_factory: Any) -> None:
    env: GangEnv = gang_env_factory()
    env.emulator.client.inject_fault(
        "RunInstances",
        "OptInRequired",
        message="You are not subscribed to this service. Please go to http://aws.amazon.com.",
        count=50,
        client=os.environ["AWS_ACCESS_KEY_ID"],
    )
    workload = env.submit("opt-in", "pool-opt-in", count=2)

    check = eventually(
        lambda: (s := env.check(workload)) and "OptInRequired" in s["message"] and s,
        120,
        lambda: f"the check naming OptInRequired (now {env.check(workload)})",
    )
    env.emulator.client.clear_faults()

    assert "account must opt in" in check["message"], check
    assert "pool's shape" not in check["message"], check
    assert env.launches() == 0
