"""A launch that meets a resource of the pool's stack deleted outside it (its launch
template, its placement group): the pool goes back to a prepare that refreshes the stack,
says what it made again, and launches once more; a second miss right after is reported as
a configuration failure, not repaired in a loop."""

from __future__ import annotations

from botocore.exceptions import ClientError  # type: ignore[import-untyped,unused-ignore]

from provisioner.api.constants import FailureKind, Phase
from provisioner.api.gangnodepool import StackOperation
from provisioner.cloud.errors import ErrorKind, to_cloud_error
from provisioner.controllers.pool.outcomes import outcome
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.steps import Action, ActionResult, PoolView
from tests.support.pool_views import TIMINGS, view

GONE = "LaunchTemplateNotFound"
GONE_MESSAGE = "RunInstances failed (InvalidLaunchTemplateId.NotFound: lt-1 does not exist)."
REPAIRED = "launch template lt-1 was deleted outside the stack; recreated as lt-2"


def _acquiring(**status: object) -> PoolView:
    return view(phase=Phase.ACQUIRING, status={"acquireGeneration": 3, **status})


def _after(given: PoolView, result: ActionResult) -> tuple[PoolView, tuple[str, ...], float]:
    step = plan(given)
    status, wait, events = outcome(given, step, result)
    assert wait is not None
    return (
        view(phase=status.phase, status=status.model_dump(mode="json", by_alias=True)),
        tuple(f"{e.reason}: {e.message}" for e in events),
        wait,
    )


def _gone() -> ActionResult:
    return ActionResult(False, failure=FailureKind.NOT_PREPARED, reason=GONE, message=GONE_MESSAGE)


def test_a_launch_that_meets_its_template_gone_prepares_with_a_refresh_then_launches() -> None:
    given = _acquiring()
    assert plan(given).action is Action.LAUNCH

    drifted, events, wait = _after(given, _gone())
    assert wait == 0.0
    assert drifted.status.stack_drift == GONE_MESSAGE
    assert drifted.status.launch_in_progress is None
    assert drifted.status.acquire_generation == 3  # nothing was launched
    assert [e.split(":")[0] for e in events] == ["StackDrift"]

    step = plan(drifted)
    assert step.action is Action.PREPARE_STACK and step.refresh_stack, step.why

    repaired, events, _ = _after(drifted, ActionResult(True, repairs=(REPAIRED,)))
    assert repaired.status.stack_drift is None
    assert repaired.status.last_stack_operation is StackOperation.REPAIR
    assert events == (
        "StackRepaired: Launch template lt-1 was deleted outside the stack; recreated as lt-2.",
    )
    assert plan(repaired).action is Action.LAUNCH


def test_a_refresh_that_finds_nothing_gone_says_so() -> None:
    drifted, _, _ = _after(_acquiring(), _gone())
    _, events, _ = _after(drifted, ActionResult(True))
    assert len(events) == 1 and events[0].startswith("StackRepaired: The stack was refreshed")


def test_a_second_miss_right_after_a_repair_is_a_configuration_failure_not_a_loop() -> None:
    given = _acquiring(lastStackOperation="repair")
    after, events, wait = _after(given, _gone())
    assert after.status.stack_drift is None
    assert plan(after).action is Action.LAUNCH  # after the config wait, not a second refresh
    assert wait == TIMINGS.config_delay
    assert after.status.last_error is not None
    assert "was refreshed and the resource made again" in after.status.last_error.message
    assert len(events) == 1


def test_a_prepare_that_repaired_by_itself_says_what_it_made_again() -> None:
    # A prepare whose update met the template gone refreshes in the driver: the pool is
    # told all the same.
    given = view(phase=Phase.ACQUIRING, status={"acquireGeneration": 3}, prepared=False)
    assert plan(given).action is Action.PREPARE_STACK
    _, events, _ = _after(given, ActionResult(True, repairs=(REPAIRED,)))
    assert [e.split(":")[0] for e in events] == ["StackRepaired"]


def _client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "gone"}}, "RunInstances")


def test_ec2s_not_found_answers_for_the_stacks_resources_send_the_pool_back_to_prepare() -> None:
    for code in (
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidPlacementGroup.Unknown",
    ):
        err = to_cloud_error(_client_error(code), "RunInstances")
        assert err.failure is FailureKind.NOT_PREPARED, code
        assert not err.ends_generation
        assert "refreshes the stack" in err.message, code
    # A malformed id is the request's fault, not drift.
    malformed = to_cloud_error(_client_error("InvalidLaunchTemplateId.Malformed"), "RunInstances")
    assert malformed.kind is ErrorKind.CONFIG and malformed.failure is FailureKind.CONFIG
