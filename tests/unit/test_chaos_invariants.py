"""Each invariant the chaos and fault suites rely on fails when fed a world that breaks it.

A healthy world (pool `p` Satisfied with its 2 instances, recorded by its stack; pool `q`
released to Idle with its old generation terminated) has no problem; each test breaks one
thing and expects the sentence that names it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.cloud.billing import Gang
from tests.chaos.invariants import Expect, World, cost_problems, problems

POOLS = {"p": Expect(2), "q": Expect(2, satisfied=False)}


def _instance(iid: str, pool: str, group: str, state: str = "running") -> dict[str, Any]:
    tags = [
        {"Key": c.TAG_POOL, "Value": pool},
        {"Key": c.TAG_GROUP, "Value": group},
    ]
    return {"InstanceId": iid, "State": {"Name": state}, "Tags": tags}


def _healthy() -> World:
    return World(
        statuses={
            "p": {"phase": Phase.SATISFIED, "instanceIds": ["i-1", "i-2"]},
            "q": {"phase": Phase.IDLE, "instanceIds": []},
        },
        instances=[
            _instance("i-1", "p", "p-g1"),
            _instance("i-2", "p", "p-g1"),
            _instance("i-8", "q", "q-g1", "terminated"),
            _instance("i-9", "q", "q-g1", "terminated"),
        ],
        stack_records={"p": {"i-1", "i-2"}, "q": None},
        detached_enis={"eni-before"},
    )


def test_a_healthy_world_has_no_problem() -> None:
    assert problems(_healthy(), POOLS, {"eni-before"}) == []


def test_a_leaked_eni_is_found() -> None:
    world = replace(_healthy(), detached_enis={"eni-before", "eni-leaked"})
    assert problems(world, POOLS, {"eni-before"}) == ["detached ENIs left behind: ['eni-leaked']"]


def test_an_extra_instance_in_a_generation_is_found_even_once_terminated() -> None:
    world = replace(
        _healthy(), instances=[*_healthy().instances, _instance("i-3", "p", "p-g1", "terminated")]
    )
    assert problems(world, POOLS, {"eni-before"}) == [
        "pool p group p-g1 launched 3 > N=2 instances"
    ]


def test_a_stack_that_disagrees_with_ec2_is_found() -> None:
    world = replace(_healthy(), stack_records={"p": {"i-1"}, "q": None})
    assert problems(world, POOLS, {"eni-before"}) == [
        "pool p: stack records ['i-1'], EC2 runs ['i-1', 'i-2']"
    ]


def test_a_released_pool_whose_stack_still_records_instances_is_found() -> None:
    world = replace(_healthy(), stack_records={"p": {"i-1", "i-2"}, "q": {"i-8"}})
    assert problems(world, POOLS, {"eni-before"}) == ["pool q: stack records ['i-8'], EC2 runs []"]


def test_a_stray_instance_no_pool_owns_is_found() -> None:
    world = replace(_healthy(), instances=[*_healthy().instances, _instance("i-7", "r", "r-g1")])
    assert problems(world, POOLS, {"eni-before"}) == [
        "live managed instances no pool owns: ['i-7']"
    ]


@pytest.mark.parametrize(
    ("pool", "status", "expected"),
    [
        ("p", {"phase": Phase.JOINING, "instanceIds": ["i-1", "i-2"]}, "is Joining with 2/2"),
        ("p", {"phase": Phase.SATISFIED, "instanceIds": ["i-1"]}, "is Satisfied with 1/2"),
        ("q", {"phase": Phase.IDLE, "instanceIds": ["i-8"]}, "is Idle with 1/0"),
    ],
)
def test_a_pool_not_in_its_expected_state_is_found(
    pool: str, status: dict[str, Any], expected: str
) -> None:
    world = replace(_healthy(), statuses={**_healthy().statuses, pool: status})
    assert any(expected in line for line in problems(world, POOLS, {"eni-before"}))


def test_a_live_instance_its_pool_does_not_own_is_found() -> None:
    # The pool says it released everything, EC2 still runs one: the headline failure.
    world = replace(_healthy(), instances=[*_healthy().instances, _instance("i-10", "q", "q-g2")])
    found = problems(world, POOLS, {"eni-before"})
    assert "pool q: EC2 runs ['i-10'], status owns []" in found


# --- cost: EC2's history of every instance, judged by billing's one definition ----------------

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
NOW = T0 + timedelta(seconds=900)


def _history(
    iid: str, pool: str, group: str, launched: float, ended: float | None = None
) -> dict[str, Any]:
    """One DescribeInstances entry as EC2 writes it, `launched`/`ended` seconds after T0."""
    raw = _instance(iid, pool, group, "running" if ended is None else "terminated")
    raw["LaunchTime"] = T0 + timedelta(seconds=launched)
    if ended is not None:
        at = T0 + timedelta(seconds=ended)
        raw["StateTransitionReason"] = f"User initiated ({at:%Y-%m-%d %H:%M:%S} GMT)"
    return raw


def _served_history() -> list[dict[str, Any]]:
    # Two lives of pool p, each a whole set that served its Workload, one after the other.
    return [
        _history("i-1", "p", "gen-1", 0, 300),
        _history("i-2", "p", "gen-1", 0, 300),
        _history("i-3", "p", "gen-2", 400),
        _history("i-4", "p", "gen-2", 400),
    ]


SERVED = {Gang("p", "gen-1"), Gang("p", "gen-2")}


def test_whole_sets_that_served_one_after_the_other_cost_nothing_stranded() -> None:
    assert cost_problems(_served_history(), {"p": 2}, SERVED, NOW) == []


def test_a_whole_set_that_never_served_its_workload_is_found() -> None:
    # gen-1 ran whole for 300 s and was released; no Workload was ever admitted onto it.
    found = cost_problems(_served_history(), {"p": 2}, {Gang("p", "gen-2")}, NOW)
    assert found == [
        "pool p group gen-1: a whole set ended without serving a Workload "
        "(600 node-seconds stranded)"
    ]


def test_two_whole_generations_of_one_pool_at_once_are_found() -> None:
    history = [
        _history("i-1", "p", "gen-1", 0, 300),
        _history("i-2", "p", "gen-1", 0, 300),
        _history("i-3", "p", "gen-2", 200),
        _history("i-4", "p", "gen-2", 200),
    ]
    assert cost_problems(history, {"p": 2}, SERVED, NOW) == [
        "pool p: groups gen-1 and gen-2 ran whole at once for 100 s "
        "(200 node-seconds of gen-2 stranded)"
    ]


def test_a_partial_set_rolled_back_is_not_a_cost_problem() -> None:
    # A short answer (1 of 2) terminated at once: stranded, and EC2's doing, not the run's.
    history = [*_served_history(), _history("i-9", "p", "gen-3", 500, 502)]
    assert cost_problems(history, {"p": 2}, SERVED, NOW) == []


def test_a_second_whole_set_that_never_served_beside_the_first_is_found() -> None:
    # A double launch: gen-2 ran whole beside the serving gen-1 and was released unused.
    history = [*_served_history()[:2], _history("i-5", "p", "gen-2", 100, 200)]
    history.append(_history("i-6", "p", "gen-2", 100, 200))
    found = cost_problems(history, {"p": 2}, {Gang("p", "gen-1")}, NOW)
    assert found == [
        "pool p group gen-2: a whole set ended without serving a Workload "
        "(200 node-seconds stranded)"
    ]
