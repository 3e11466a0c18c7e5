"""EC2's eventual consistency ("Eventual consistency in the Amazon EC2 API") against the
release and the rollback: an instance is gone only when EC2, asked by id, shows it
shutting-down or terminated.

Each switch is armed in the emulator and shown to make its world first (a listing that
misses part of a fresh set; NotFound by id; TerminateInstances answering NotFound and
terminating nothing; a terminated instance gone from EC2's answers after about an hour),
then the product is shown not to count an instance gone that still runs. "Alive" is read
from moto's own record, which no switch touches.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from botocore.exceptions import ClientError
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

from devenv.emulator.consistency import (
    DESCRIBE_BY_ID,
    LISTING,
    TERMINATE,
    TERMINATED_VISIBLE_SECONDS,
)
from provisioner.api.constants import EventReason, FailureKind, Phase
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.release import NOT_FOUND_IS_GONE_AFTER, release
from provisioner.cloud.types import LaunchResult
from provisioner.controllers.pool.outcomes import outcome
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.steps import Action, ActionResult, Instance, ReleasePurpose
from tests.support.ec2_listing import described_instances
from tests.support.pool_views import IDS, LIVE, NOW, active, view
from tests.unit.test_cloud_helpers import World, emulated_aws

pytestmark = pytest.mark.unit

N = 4
WINDOW = 30.0


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def alive(world: World) -> set[str]:
    """What EC2 runs (and bills), from moto's own record: no switch hides anything here."""
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][world.ec2.meta.region_name]
    return {
        i.id
        for r in backend.reservations.values()
        for i in r.instances
        if i.state in ("pending", "running")
    }


def gang(world: World, count: int = N) -> LaunchResult:
    return world.engine.acquire(world.spec(count=count))


def not_found(call: object) -> bool:
    try:
        call()  # type: ignore[operator]
    except ClientError as err:
        return err.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
    return False


# --- the emulator makes each world --------------------------------------------------------
def test_a_listing_lag_with_a_share_lists_part_of_a_fresh_set(
    world: World,
) -> None:
    world.emu.set_lag(LISTING, WINDOW, share=0.5)
    ids = gang(world).instance_ids
    listed = {i["InstanceId"] for i in described_instances(world.ec2)}
    assert listed == set(ids[:2]), "half of the fresh set is listed"
    world.clock.advance(WINDOW + 1)
    assert {i["InstanceId"] for i in described_instances(world.ec2)} == set(ids)


def test_a_describe_lag_answers_not_found_by_id_and_a_terminate_lag_terminates_nothing(
    world: World,
) -> None:
    world.emu.set_lag(DESCRIBE_BY_ID, WINDOW)
    world.emu.set_lag(TERMINATE, WINDOW)
    ids = list(gang(world).instance_ids)
    assert not_found(lambda: world.ec2.describe_instances(InstanceIds=ids[:1]))
    assert not_found(lambda: world.ec2.terminate_instances(InstanceIds=ids))
    assert alive(world) == set(ids), "a NotFound terminate terminated something"
    world.clock.advance(WINDOW + 1)
    world.ec2.terminate_instances(InstanceIds=ids)
    assert alive(world) == set()


def test_a_lag_scoped_to_another_client_leaves_this_one_alone(world: World) -> None:
    for kind in (LISTING, DESCRIBE_BY_ID, TERMINATE):
        world.emu.set_lag(kind, WINDOW, client="AKIDSOMEONEELSE")
    ids = list(gang(world).instance_ids)
    assert {i["InstanceId"] for i in described_instances(world.ec2)} == set(ids)
    world.ec2.describe_instances(InstanceIds=ids)
    world.ec2.terminate_instances(InstanceIds=ids)
    assert alive(world) == set()


def test_a_terminated_instance_is_gone_from_answers_after_an_hour_but_not_from_history(
    world: World,
) -> None:
    ids = list(gang(world, 2).instance_ids)
    world.ec2.terminate_instances(InstanceIds=ids)
    world.emu.advance_clock(TERMINATED_VISIBLE_SECONDS - 60)
    states = {i["InstanceId"]: i["State"]["Name"] for i in described_instances(world.ec2)}
    assert states == dict.fromkeys(ids, "terminated"), "listed for about an hour"
    world.emu.advance_clock(120)
    assert described_instances(world.ec2) == []
    assert not_found(lambda: world.ec2.describe_instances(InstanceIds=ids[:1]))
    assert not_found(lambda: world.ec2.terminate_instances(InstanceIds=ids[:1]))
    history = {i["InstanceId"]: i for i in world.emu.instance_history()}
    assert {history[i]["State"]["Name"] for i in ids} == {"terminated"}
    assert all(history[i]["LaunchTime"] for i in ids)


# --- the release ---------------------------------------------------------------------------
def test_release_does_not_count_a_terminate_answering_not_found(world: World) -> None:
    lag = 120.0  # longer than the release's own wait (60 s): it ends before EC2 catches up
    world.emu.set_lag(TERMINATE, lag)
    ids = gang(world).instance_ids

    report = world.engine.release(ids, eni_wait_seconds=0, poll_seconds=5)

    counted = set(report.terminated) | set(report.already_gone)
    assert not counted & alive(world), f"counted gone while running: {counted & alive(world)}"
    assert alive(world) == set(ids) and set(report.unconfirmed) == set(ids)
    # The same release, once EC2 has caught up, terminates and confirms them.
    world.clock.advance(lag)
    again = world.engine.release(ids, eni_wait_seconds=0)
    assert again.all_gone and alive(world) == set()


def test_release_retries_a_not_found_terminate_within_its_wait(world: World) -> None:
    world.emu.set_lag(TERMINATE, 12)
    ids = gang(world).instance_ids
    report = world.engine.release(ids, eni_wait_seconds=0, poll_seconds=5)
    assert alive(world) == set(), "the release gave up on a terminate that answered NotFound"
    assert report.all_gone and set(report.terminated) == set(ids)
    assert world.clock.sleeps[:3] == [5, 5, 5]


def test_release_of_a_fresh_set_neither_listed_nor_found_by_id_terminates_it(
    world: World,
) -> None:
    world.emu.set_lag(LISTING, WINDOW)
    world.emu.set_lag(DESCRIBE_BY_ID, WINDOW)
    ids = gang(world).instance_ids
    assert described_instances(world.ec2) == []

    report = world.engine.release(ids, eni_wait_seconds=0)

    counted = set(report.terminated) | set(report.already_gone)
    assert not counted & alive(world), f"counted gone while running: {counted & alive(world)}"
    # The terminate path knew them: they are terminating, and confirmed once EC2 answers.
    world.clock.advance(WINDOW)
    assert alive(world) == set()
    assert world.engine.release(ids, eni_wait_seconds=0).all_gone


def test_not_found_by_id_counts_as_gone_only_for_an_id_known_past_the_bound(
    world: World,
) -> None:
    ids = list(gang(world, 2).instance_ids)
    known_since = world.clock.now()
    world.ec2.terminate_instances(InstanceIds=ids)
    world.emu.advance_clock(TERMINATED_VISIBLE_SECONDS + 60)  # EC2 forgot them
    # The bound in figures of its own, not read from the constant under test: EC2's
    # propagation takes "a few minutes", so an id known for 8 is not yet proven gone; the
    # hour a terminated instance stays listed is far past 10.
    assert timedelta(minutes=10) == NOT_FOUND_IS_GONE_AFTER
    world.clock.advance(8 * 60)
    early = release(
        world.ec2,
        world.clock,
        ids,
        known_since=known_since,
        eni_wait_seconds=0,
        confirm_wait_seconds=10,
    )
    assert set(early.unconfirmed) == set(ids)
    world.clock.advance(2 * 60)
    late = world.engine.release(ids, eni_wait_seconds=0, known_since=known_since)
    assert late.all_gone and set(late.already_gone) == set(ids)


# --- the rollback inside a launch ----------------------------------------------------------
def test_a_rollback_whose_terminate_answers_not_found_hands_the_live_ids_over(
    world: World,
) -> None:
    world.emu.set_lag(TERMINATE, WINDOW)
    world.emu.set_short_answer("RunInstances", missing=1)

    with pytest.raises(CloudError) as caught:
        gang(world)

    err = caught.value
    assert err.kind is ErrorKind.MALFORMED
    assert alive(world), "the switch made no live partial set"
    assert set(err.instance_ids) == alive(world), err
    assert "were terminated" not in err.message, err


def test_a_rollback_of_ids_not_found_by_id_is_not_reported_done(world: World) -> None:
    world.emu.set_lag(DESCRIBE_BY_ID, WINDOW)
    world.emu.set_short_answer("RunInstances", missing=1)
    with pytest.raises(CloudError) as caught:
        gang(world)
    # The terminate went through, but EC2 has not shown it by id: not proven yet.
    assert set(caught.value.instance_ids) == {
        i for i in caught.value.instance_ids if i not in alive(world)
    }
    assert caught.value.instance_ids, caught.value


# --- the pool keeps the ids until they are gone --------------------------------------------
ROLLED = ("i-00000000000000aa1", "i-00000000000000aa2")


@pytest.mark.parametrize(
    ("answer", "reason", "event_type"),
    [
        # EC2 did not show every rolled-back instance going: they are terminated again.
        ({"unreleased_ids": ROLLED}, EventReason.ROLLBACK_UNCONFIRMED, "Warning"),
        # It did, but a node that joined first left its ENI behind: released for the ENIs.
        ({"rolled_back_ids": ROLLED}, EventReason.ROLLED_BACK, "Normal"),
    ],
    ids=["unconfirmed", "confirmed"],
)
def test_a_rolled_back_launch_leaves_its_ids_for_the_next_pass_to_release(
    answer: dict[str, tuple[str, ...]], reason: str, event_type: str
) -> None:
    acquiring = view(phase=Phase.ACQUIRING, status={"acquireGeneration": 3})
    step = plan(acquiring)
    assert step.action is Action.LAUNCH
    result = ActionResult(
        False, failure=FailureKind.MALFORMED, reason="MalformedLaunch", message="short", **answer
    )
    status, _, _ = outcome(acquiring, step, result)
    held = status.release_in_progress
    assert held is not None and held.instance_ids == ROLLED
    assert held.reason == reason

    # The next pass, with EC2's listing showing none of them, releases them by id first.
    after = view(phase=Phase.ACQUIRING, status=status.model_dump(by_alias=True, mode="json"))
    nxt = plan(after)
    assert nxt.action is Action.RELEASE_SET and set(nxt.release_ids) == set(ROLLED)
    assert nxt.release_purpose is ReleasePurpose.STRAYS
    # Its marker keeps the first start (NotFound by id is judged from when they were known)
    # and the rollback's reason; a rollback's own cleanup is no Warning about strays.
    assert nxt.status.release_in_progress is not None
    assert nxt.status.release_in_progress.started_at == NOW
    assert nxt.status.release_in_progress.reason == reason
    assert [(e.type, e.reason) for e in nxt.events] == [(event_type, reason)]


def test_an_instance_no_rollback_named_beside_a_rollbacks_ids_is_a_stray_warning() -> None:
    rolled = {
        "acquireGeneration": 3,
        "releaseInProgress": {
            "startedAt": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "reason": EventReason.ROLLED_BACK,
            "instanceIds": list(ROLLED),
        },
    }
    other = Instance("i-00000000000000099", "gen-7")  # live, in no set and no rollback
    nxt = plan(view(phase=Phase.ACQUIRING, status=rolled, live=(other,)))
    assert set(nxt.release_ids) == {*ROLLED, other.instance_id}
    assert [(e.type, e.reason) for e in nxt.events] == [("Warning", "StrayInstances")]
    assert nxt.status.release_in_progress is not None
    assert nxt.status.release_in_progress.reason == EventReason.STRAY_INSTANCES


def test_a_release_planned_again_keeps_its_ids_and_its_first_start() -> None:
    # A join-deadline release EC2 has not confirmed: the next pass plans the release again
    # (the deadline is still past). The marker's start must not move, or NotFound by id for
    # an instance terminated long ago could never be judged against it.
    started = NOW - timedelta(minutes=3)
    status = active(
        joinDeadline=(NOW - timedelta(minutes=4)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        releaseInProgress={
            "startedAt": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "reason": "JoinDeadlineExceeded",
            "instanceIds": list(IDS),
        },
    )
    joining = view(phase=Phase.JOINING, status=status, live=LIVE)
    step = plan(joining)
    assert step.action is Action.RELEASE_SET and set(step.release_ids) == set(IDS)
    assert step.status.release_in_progress is not None
    assert step.status.release_in_progress.started_at == started
    failed = ActionResult(
        False, failure=FailureKind.RETRYABLE, reason="TerminationUnconfirmed", message="no"
    )
    left, _, _ = outcome(joining, step, failed)
    assert left.instance_ids == IDS and left.release_in_progress is not None
