"""The stranded counter on /metrics is billing's one definition, fed EC2's whole history.

`atomic_gang_node_seconds_stranded_total` is what the reaper's sweep adds through
`billing.Meter`: node-seconds billed outside the time the instance's whole gang ran. So a
partial set sitting in Joining past its join deadline is stranded, a rolled-back instance
that lived and died between two sweeps is stranded (minimum charge and all), a whole gang
that is Ready is not, and two pools' halves with the same group name are not a gang.
Each row sweeps once (the baseline a restarted controller starts from), lets the world
change, sweeps again and reads what the counters gained on the reaper's own registry.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.cloud.billing import Bill, bill, instance_life
from provisioner.cloud.block_bill import BoughtBlock
from provisioner.cloud.views import instance_view_from
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.reaper import PoolFacts, Reaper
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.unit

CLUSTER = "stranded"
T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
STRANDED = "atomic_gang_node_seconds_stranded_total"
BILLED = "atomic_gang_node_seconds_billed_total"


def described(
    iid: str, pool: str, group: str, launched: float, ended: float | None = None
) -> dict[str, Any]:
    """One DescribeInstances entry, as EC2 writes it, `launched`/`ended` seconds after T0."""
    raw: dict[str, Any] = {
        "InstanceId": iid,
        "LaunchTime": T0 + timedelta(seconds=launched),
        "State": {"Name": "running" if ended is None else "terminated"},
        "Tags": [
            {"Key": c.TAG_MANAGED, "Value": "true"},
            {"Key": c.TAG_CLUSTER, "Value": CLUSTER},
            {"Key": c.TAG_POOL, "Value": pool},
            {"Key": c.TAG_GROUP, "Value": group},
        ],
    }
    if ended is not None:
        at = T0 + timedelta(seconds=ended)
        raw["StateTransitionReason"] = f"User initiated ({at:%Y-%m-%d %H:%M:%S} GMT)"
    return raw


class Sweeps:
    def __init__(self, pools: dict[str, PoolFacts]) -> None:
        # EC2's history of the cluster's managed instances, as DescribeInstances wrote it.
        self.raw: dict[str, dict[str, Any]] = {}
        self.ec2 = FakeEngine(failing={"release": AssertionError("nothing is the reaper's")})
        self.metrics = ControllerMetrics()
        self.at = T0
        self.reaper = Reaper(
            self.ec2,
            CLUSTER,
            lambda: pools,
            30.0,
            lambda: self.at,
            self.metrics,
            cache_problem=lambda: None,
            ownership_key=None,
            max_lifetime=timedelta(hours=168),
            stack_record=lambda _pool: frozenset(),
        )

    def add(self, *entries: dict[str, Any]) -> None:
        for raw in entries:
            self.raw[raw["InstanceId"]] = raw
            self.ec2.fleet[raw["InstanceId"]] = instance_view_from(raw)

    def gained(self, at: float) -> Bill:
        """Sweep at `at` seconds after T0; what billed and stranded gained since before."""
        before = self._read()
        self.at = T0 + timedelta(seconds=at)
        self.reaper.sweep()
        after = self._read()
        return Bill(after.billed - before.billed, after.stranded - before.stranded)

    def _read(self) -> Bill:
        registry = self.metrics.registry
        return Bill(
            registry.get_sample_value(BILLED) or 0.0, registry.get_sample_value(STRANDED) or 0.0
        )


def test_a_partial_set_joining_past_its_deadline_is_stranded_and_a_ready_gang_is_not() -> None:
    # `short` got 2 of its 3 (a node never came; the join deadline passed at 60 s);
    # `whole` has all 3 Ready.
    sweeps = Sweeps(
        {
            "short": PoolFacts(Phase.JOINING, claimed=True, gang_size=3),
            "whole": PoolFacts(Phase.SATISFIED, claimed=True, gang_size=3),
        }
    )
    sweeps.add(*(described(f"i-s{n}", "short", "gen-1", 0) for n in range(2)))
    sweeps.add(*(described(f"i-w{n}", "whole", "gen-1", 0) for n in range(3)))

    assert sweeps.gained(10) == Bill(0, 0), "the first sweep is the baseline"
    assert sweeps.gained(100) == Bill(5 * 90, 2 * 90)


def test_a_rolled_back_launch_between_two_sweeps_is_stranded_minimum_charge_and_all() -> None:
    sweeps = Sweeps({"pool": PoolFacts(Phase.ACQUIRING, claimed=True, gang_size=4)})
    sweeps.gained(0)
    # A fleet answered 3 of 4 at 5 s; the product terminated the 3 two seconds later.
    sweeps.add(*(described(f"i-r{n}", "pool", "gen-2", 5, 7) for n in range(3)))

    assert sweeps.gained(30) == Bill(3 * 60, 3 * 60)
    assert sweeps.gained(60) == Bill(0, 0), "counted once, not at every sweep"


def test_two_pools_halves_with_the_same_group_name_are_not_a_whole_gang() -> None:
    sweeps = Sweeps(
        {
            "a": PoolFacts(Phase.JOINING, claimed=True, gang_size=2),
            "b": PoolFacts(Phase.JOINING, claimed=True, gang_size=2),
        }
    )
    sweeps.add(described("i-a", "a", "gen-1", 0), described("i-b", "b", "gen-1", 0))
    sweeps.gained(0)

    assert sweeps.gained(50) == Bill(100, 100)


def test_the_counter_is_billing_over_the_same_history() -> None:
    # A gang whole from 0 to 200 s, then one member lost: the survivor strands from then.
    sweeps = Sweeps({"pool": PoolFacts(Phase.SATISFIED, claimed=True, gang_size=2)})
    sweeps.add(described("i-1", "pool", "gen-1", 0), described("i-2", "pool", "gen-1", 0))
    sweeps.gained(0)
    sweeps.gained(150)
    sweeps.add(described("i-2", "pool", "gen-1", 0, 200))
    gained = sweeps.gained(300)

    lives = [instance_life(r) for r in sweeps.raw.values()]
    billed = bill(lives, lambda _gang: 2, T0 + timedelta(seconds=300))
    assert sum(b.stranded for b in billed.values()) == pytest.approx(100)
    assert gained.stranded == pytest.approx(100)


def test_a_bought_blocks_hours_no_gang_ran_on_are_stranded() -> None:
    """A pool's bought Capacity Block is paid whole: its instance-seconds so far less those
    its gang ran inside the block's window are its stranded gauge (`cloud.block_bill`)."""
    block = BoughtBlock("cr-1", "blocked", 2, T0, T0 + timedelta(hours=24), Decimal("700"))
    sweeps = Sweeps({"blocked": PoolFacts(Phase.SATISFIED, claimed=True, gang_size=2, block=block)})
    # One of the block's two slots ran from 100 s; the other never did.
    sweeps.add(described("i-b0", "blocked", "gen-1", 100))
    sweeps.gained(10)
    sweeps.gained(400)
    stranded = sweeps.metrics.registry.get_sample_value(
        "atomic_gang_capacity_block_seconds_stranded", {"pool": "blocked"}
    )
    assert stranded == 2 * 400 - 300
