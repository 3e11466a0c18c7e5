"""One meaning of stranded: the share of billed node-seconds outside the whole gang's run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.cloud.billing import (
    Bill,
    Gang,
    InstanceLife,
    Overlap,
    bill,
    instance_life,
    life_of,
    never_served,
    overlaps,
    whole_intervals,
)
from provisioner.cloud.views import instance_view_from

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def _life(iid: str, start: float, end: float | None, group: str = "g1") -> InstanceLife:
    return InstanceLife(
        iid,
        group,
        T0 + timedelta(seconds=start),
        None if end is None else T0 + timedelta(seconds=end),
    )


def _bills(lives: list[InstanceLife], n: int, now: float) -> dict[str, Bill]:
    return bill(lives, lambda group: n, T0 + timedelta(seconds=now))


def test_a_whole_gang_strands_nothing_while_it_runs() -> None:
    bills = _bills([_life("a", 0, None), _life("b", 0, None)], n=2, now=600)
    assert bills == {"a": Bill(600, 0), "b": Bill(600, 0)}


def test_three_of_four_running_is_all_stranded() -> None:
    lives = [_life(i, 0, None) for i in "abc"]
    bills = _bills(lives, n=4, now=300)
    assert sum(b.stranded for b in bills.values()) == 900
    assert sum(b.billed for b in bills.values()) == 900


def test_a_rolled_back_short_answer_bills_the_minimum_all_stranded() -> None:
    # A fleet answered 3 of 4; the product terminated the 3 two seconds later.
    lives = [_life(i, 0, 2) for i in "abc"]
    assert sum(b.stranded for b in _bills(lives, n=4, now=600).values()) == 180


def test_a_whole_gang_that_lived_seconds_bills_the_minimum_none_stranded() -> None:
    bills = _bills([_life("a", 0, 20), _life("b", 0, 20)], n=2, now=600)
    assert bills == {"a": Bill(60, 0), "b": Bill(60, 0)}


def test_a_late_member_strands_the_early_ones_until_the_gang_is_whole() -> None:
    lives = [_life("a", 0, None), _life("b", 100, None)]
    bills = _bills(lives, n=2, now=400)
    assert bills["a"] == Bill(400, 100)
    assert bills["b"] == Bill(300, 0)


def test_a_member_lost_early_strands_the_survivor_from_then_on() -> None:
    lives = [_life("a", 0, 500), _life("b", 0, None)]
    bills = _bills(lives, n=2, now=800)
    assert bills["a"] == Bill(500, 0)
    assert bills["b"] == Bill(800, 300)


def test_a_set_launched_and_terminated_a_second_apart_strands_nothing() -> None:
    # One RunInstances and one TerminateInstances: EC2's per-instance times straddle a
    # second boundary.
    lives = [_life("a", 0, 300), _life("b", 1, 301)]
    assert sum(b.stranded for b in _bills(lives, n=2, now=600).values()) == 0


def test_a_member_lost_well_before_the_rest_still_strands_them() -> None:
    lives = [_life("a", 0, 300), _life("b", 0, 310)]
    bills = _bills(lives, n=2, now=600)
    assert bills["a"].stranded == 0
    assert bills["b"].stranded == pytest.approx(10)


def test_generations_are_judged_apart() -> None:
    lives = [_life("a", 0, 100, "g1"), _life("b", 100, None, "g2")]
    assert sum(b.stranded for b in _bills(lives, n=2, now=200).values()) == 200


@pytest.mark.parametrize(
    ("reason", "ended"),
    [
        ("User initiated (2026-11-30 12:05:00 GMT)", T0 + timedelta(minutes=5)),
        ("User initiated (2026-11-30 12:05:00 UTC)", T0 + timedelta(minutes=5)),
        ("", T0),
    ],
)
def test_an_ec2_entry_becomes_a_life(reason: str, ended: datetime) -> None:
    raw: dict[str, Any] = {
        "InstanceId": "i-1",
        "LaunchTime": T0,
        "State": {"Name": "terminated"},
        "StateTransitionReason": reason,
        "Tags": [{"Key": c.TAG_GROUP, "Value": "g7"}],
    }
    assert instance_life(raw) == InstanceLife("i-1", "g7", T0, ended)


def test_a_running_entry_has_no_end() -> None:
    raw = {"InstanceId": "i-2", "LaunchTime": T0, "State": {"Name": "running"}, "Tags": []}
    assert instance_life(raw) == InstanceLife("i-2", None, T0, None)


def test_whole_intervals_are_the_time_bill_counts_as_useful() -> None:
    lives = [_life("a", 0, None), _life("b", 100, 300), _life("c", 0, None, "g2")]
    whole = whole_intervals(lives, lambda group: 2, T0 + timedelta(seconds=400))
    assert whole == {
        Gang(None, "g1"): [(T0 + timedelta(seconds=100), T0 + timedelta(seconds=300))],
        Gang(None, "g2"): [],
    }


def test_the_engines_view_and_the_raw_entry_are_the_same_life() -> None:
    # The reaper bills the engine's views, the demo and the benches raw entries.
    raw = {
        "InstanceId": "i-3",
        "LaunchTime": T0,
        "State": {"Name": "terminated"},
        "StateTransitionReason": "User initiated (2026-11-30 12:05:00 GMT)",
        "Tags": [{"Key": c.TAG_GROUP, "Value": "gen-1"}, {"Key": c.TAG_POOL, "Value": "p"}],
    }
    assert life_of(instance_view_from(raw)) == instance_life(raw)
    assert instance_life(raw).gang == Gang("p", "gen-1")


def test_the_same_group_name_in_two_pools_is_two_gangs() -> None:
    lives = [_life("a", 0, None), InstanceLife("b", "g1", T0, None, pool="other")]
    assert sum(b.stranded for b in _bills(lives, n=2, now=100).values()) == 200


# --- a whole set that never served, and two whole generations at once ----------------------


def _pool_life(
    iid: str, group: str, start: float, end: float | None, pool: str = "p"
) -> InstanceLife:
    return InstanceLife(
        iid,
        group,
        T0 + timedelta(seconds=start),
        None if end is None else T0 + timedelta(seconds=end),
        pool=pool,
    )


def test_a_whole_set_that_ended_without_serving_a_workload_is_all_stranded() -> None:
    # gen-1 ran whole for 300 s and was released: nothing was ever admitted onto it (its
    # Workload vanished while it joined). gen-2 served.
    lives = [
        _pool_life("a", "gen-1", 0, 300),
        _pool_life("b", "gen-1", 0, 300),
        _pool_life("c", "gen-2", 400, None),
        _pool_life("d", "gen-2", 400, None),
    ]
    served = {Gang("p", "gen-2")}
    bills = bill(lives, lambda _: 2, T0 + timedelta(seconds=600), served.__contains__)
    assert bills["a"] == Bill(300, 300) and bills["b"] == Bill(300, 300)
    assert bills["c"] == Bill(200, 0) and bills["d"] == Bill(200, 0)
    assert never_served(lives, served.__contains__, T0 + timedelta(seconds=600)) == [
        Gang("p", "gen-1")
    ]


def test_a_set_not_served_yet_is_not_judged_while_it_runs() -> None:
    lives = [_pool_life("a", "gen-1", 0, None), _pool_life("b", "gen-1", 0, 300)]
    bills = bill(lives, lambda _: 2, T0 + timedelta(seconds=600), lambda _: False)
    assert bills["b"] == Bill(300, 0), "a member ended, the gang still runs: it may serve"


def test_without_a_record_of_serving_only_ec2s_history_is_judged() -> None:
    lives = [_pool_life("a", "gen-1", 0, 300), _pool_life("b", "gen-1", 0, 300)]
    assert (
        sum(b.stranded for b in bill(lives, lambda _: 2, T0 + timedelta(seconds=600)).values()) == 0
    )


def test_two_whole_generations_of_one_pool_at_once_strand_the_younger_for_the_overlap() -> None:
    # gen-2 was launched whole at 200 s while gen-1 still ran whole until 300 s.
    lives = [
        _pool_life("a", "gen-1", 0, 300),
        _pool_life("b", "gen-1", 0, 300),
        _pool_life("c", "gen-2", 200, None),
        _pool_life("d", "gen-2", 200, None),
    ]
    now = T0 + timedelta(seconds=600)
    bills = bill(lives, lambda _: 2, now)
    assert bills["a"] == Bill(300, 0) and bills["b"] == Bill(300, 0)
    assert bills["c"] == Bill(400, 100) and bills["d"] == Bill(400, 100)
    assert overlaps(lives, lambda _: 2, now) == [
        Overlap(
            Gang("p", "gen-1"),
            Gang("p", "gen-2"),
            T0 + timedelta(seconds=200),
            T0 + timedelta(seconds=300),
        )
    ]


def test_a_set_released_a_second_before_its_successor_launched_overlaps_nothing() -> None:
    # Terminated one by one (300 s, 301 s); the next generation launched at 301 s.
    lives = [
        _pool_life("a", "gen-1", 0, 300),
        _pool_life("b", "gen-1", 0, 301),
        _pool_life("c", "gen-2", 301, None),
        _pool_life("d", "gen-2", 301, None),
    ]
    now = T0 + timedelta(seconds=600)
    assert overlaps(lives, lambda _: 2, now) == []
    assert sum(b.stranded for b in bill(lives, lambda _: 2, now).values()) == 0


def test_whole_gangs_of_two_pools_at_once_are_no_overlap() -> None:
    lives = [
        _pool_life("a", "gen-1", 0, None),
        _pool_life("b", "gen-1", 0, None),
        _pool_life("c", "gen-1", 0, None, pool="q"),
        _pool_life("d", "gen-1", 0, None, pool="q"),
    ]
    assert (
        sum(b.stranded for b in bill(lives, lambda _: 2, T0 + timedelta(seconds=60)).values()) == 0
    )


def test_gangs_without_a_pool_tag_never_overlap() -> None:
    # Instances launched by something else (a bench's baseline launcher) carry no pool tag.
    lives = [_life("a", 0, None, "g1"), _life("b", 0, None, "g1")]
    lives += [_life("c", 0, None, "g2"), _life("d", 0, None, "g2")]
    now = T0 + timedelta(seconds=60)
    assert overlaps(lives, lambda _: 2, now) == []
    assert sum(b.stranded for b in bill(lives, lambda _: 2, now).values()) == 0
