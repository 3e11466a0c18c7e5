"""An EC2 answer the catalogue lacks, from the emulator's launch to the Workload's check.

The chain a real answer takes: the engine's launch (RunInstances or CreateFleet) meets a code
no row of ``ec2_error_codes`` names, the pool's `outcome` counts it (the same token is kept),
and `decide` turns the count into Retry on the check once it reaches
``unknownErrorAttemptsBeforeRetry``, naming the code, with an Event reason. Before the
setting's count it stays Pending, so a one-off answer costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind, Phase
from provisioner.api.gangnodepool import GangNodePool, GangNodePoolStatus
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.types import LaunchSpec
from provisioner.controllers.pool.outcomes import outcome
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.steps import Action, ActionResult
from provisioner.controllers.workload.decision import decide
from tests.support.pool_views import view
from tests.support.pools import claim, pool_spec
from tests.support.pools import pool as pool_body
from tests.unit.test_cloud_fleet import fleet_spec
from tests.unit.test_cloud_helpers import World, emulated_aws
from tests.unit.test_workload_decision import SETTINGS, inputs, workload

pytestmark = pytest.mark.unit

# No row of the catalogue names it, and none ever will.
NEVER_SEEN = "InvalidFrobnicatorState"


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def _spec(world: World, action: str) -> LaunchSpec:
    return world.spec() if action == "RunInstances" else fleet_spec(world)


def _claimed_pool(status: GangNodePoolStatus) -> GangNodePool:
    body = pool_body(
        uid="pool-uid",
        spec=pool_spec(
            instance_type="p4d.24xlarge",
            claim=claim(name="wl-uid-1", uid="uid-1", claimed_at="2026-11-29T11:00:00Z"),
            owner_namespace="ml",
        ),
        status=status.model_dump(mode="json", by_alias=True, exclude_none=True),
    )
    return GangNodePool.model_validate(body)


@pytest.mark.parametrize("attempts", [1, 3])
@pytest.mark.parametrize("action", ["RunInstances", "CreateFleet"])
def test_an_unknown_code_is_retried_k_times_then_the_check_retries_naming_it(
    world: World, action: str, attempts: int
) -> None:
    settings = SETTINGS.model_copy(update={"unknown_error_attempts_before_retry": attempts})
    world.emu.inject_fault(action, NEVER_SEEN, "The frobnicator wobbles.", count=attempts)
    status: dict[str, Any] = {"acquireGeneration": 3}
    checks = []
    spec = _spec(world, action)
    for attempt in range(1, attempts + 1):
        with pytest.raises(CloudError) as caught:
            world.engine.acquire(spec)
        err = caught.value
        assert err.kind is ErrorKind.UNKNOWN and err.failure is FailureKind.UNKNOWN
        assert err.code == NEVER_SEEN
        # What the pool's action runner makes of it (`actions.PoolActions`).
        result = ActionResult(False, failure=err.failure, reason=err.reason, message=str(err))
        given = view(phase=Phase.ACQUIRING, status=status)
        step = plan(given)
        assert step.action is Action.LAUNCH, step.why
        after, _, events = outcome(given, step, result)
        # The same token is replayed: the launch marker and the generation stay.
        assert after.launch_in_progress is not None and after.acquire_generation == 3
        assert after.consecutive_unknown_errors == attempt
        assert [e.reason for e in events] == [c.EventReason.UNKNOWN_AWS_ERROR]
        assert NEVER_SEEN in events[0].message
        status = after.model_dump(mode="json", by_alias=True, exclude_none=True)
        wl_inputs = replace(inputs(workload(), _claimed_pool(after)), settings=settings)
        check = decide(wl_inputs).check
        assert check is not None
        checks.append(check)

    *before, last = checks
    assert all(c_.state == c.CheckState.PENDING for c_ in before)
    assert last.state == c.CheckState.RETRY
    assert last.reason == c.EventReason.UNKNOWN_AWS_ERROR  # the Event recorded with it
    assert NEVER_SEEN in last.message and "The frobnicator wobbles." in last.message
    # Nothing was launched by any of the answers.
    assert world.live_instances() == []


def test_a_shortfall_or_a_launch_ends_the_run_of_unknown_answers() -> None:
    given = view(phase=Phase.ACQUIRING, status={"consecutiveUnknownErrors": 2})
    step = plan(given)
    short = ActionResult(False, failure=FailureKind.CAPACITY, reason="X", message="short")
    assert outcome(given, step, short)[0].consecutive_unknown_errors == 0
    launched = ActionResult(True, instance_ids=tuple(f"i-{n:017x}" for n in range(4)))
    assert outcome(given, step, launched)[0].consecutive_unknown_errors == 0


def test_a_claim_gone_resets_the_count() -> None:
    given = view(phase=Phase.ACQUIRING, claimed=False, status={"consecutiveUnknownErrors": 2})
    assert plan(given).status.consecutive_unknown_errors == 0
