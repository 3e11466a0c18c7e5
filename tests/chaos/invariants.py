"""The invariants the chaos and fault suites judge a run by, as pure checks on a snapshot.

`observe()` reads one `World` from EC2, the pools' status and the stacks; `problems()` turns
a World into sentences, one per broken invariant, empty when all hold. Keeping the two apart
lets `tests/unit/test_chaos_invariants.py` feed each check a world that breaks it (STYLE 16):
a check that cannot fail proves nothing.

The invariants (DESIGN §4):
- N-or-0: a pool expected Satisfied holds exactly its N instances; a released pool holds 0;
- what EC2 runs for a pool is what the pool's status owns;
- the stack's record of the instance set equals what EC2 runs (no record counts as empty);
- no live managed instance outside every pool's status;
- no (pool, generation) ever launched more than N instances (terminated ones included);
- no ENI left detached that was not detached before the run.

And, from EC2's history of every instance (launch and terminate times, generation tags) by
billing's one definition (`provisioner/cloud/billing.py`), `cost_problems`:
- no whole set ended without serving a Workload (all of it is stranded);
- no two whole generations of one pool ran at once (the younger's overlap is stranded).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.cloud.billing import (
    Gang,
    bill,
    instance_life,
    never_served,
    overlaps,
    whole_intervals,
)

LIVE_STATES = frozenset({"pending", "running"})


@dataclass(frozen=True)
class Expect:
    """What one pool should look like: `n` instances when `satisfied`, else none."""

    n: int
    satisfied: bool = True


@dataclass(frozen=True)
class World:
    statuses: Mapping[str, Mapping[str, Any]]
    # Every managed instance of the cluster, in any state (terminated ones count launches).
    instances: list[dict[str, Any]]
    # The instance IDs each pool's stack records; None where the pool has no stack.
    stack_records: Mapping[str, set[str] | None]
    detached_enis: set[str] = field(default_factory=set)


def tag(instance: Mapping[str, Any], key: str) -> str | None:
    return next((t["Value"] for t in instance.get("Tags", []) if t["Key"] == key), None)


def live_ids(world: World, pool: str | None = None) -> set[str]:
    return {
        i["InstanceId"]
        for i in world.instances
        if i["State"]["Name"] in LIVE_STATES and (pool is None or tag(i, c.TAG_POOL) == pool)
    }


def launches_per_group(world: World) -> Counter[tuple[str | None, str | None]]:
    """Instances ever created, per (pool, group): a generation launching twice shows here."""
    return Counter((tag(i, c.TAG_POOL), tag(i, c.TAG_GROUP)) for i in world.instances)


def problems(world: World, pools: Mapping[str, Expect], enis_before: set[str]) -> list[str]:
    found: list[str] = []
    owned: set[str] = set()
    for pool, expect in pools.items():
        st = world.statuses.get(pool) or {}
        ids = set(st.get("instanceIds") or ())
        owned |= ids
        want = expect.n if expect.satisfied else 0
        phase_ok = st.get("phase") == Phase.SATISFIED if expect.satisfied else True
        if not phase_ok or len(ids) != want:
            found.append(f"pool {pool} is {st.get('phase')} with {len(ids)}/{want} instances")
        live = live_ids(world, pool)
        if live != ids:
            found.append(f"pool {pool}: EC2 runs {sorted(live)}, status owns {sorted(ids)}")
        recorded = world.stack_records.get(pool) or set()
        if recorded != live:
            found.append(f"pool {pool}: stack records {sorted(recorded)}, EC2 runs {sorted(live)}")
    stray = live_ids(world) - owned
    if stray:
        found.append(f"live managed instances no pool owns: {sorted(stray)}")
    for (tagged_pool, group), launched in launches_per_group(world).items():
        limit = pools.get(tagged_pool or "")
        if limit is not None and launched > limit.n:
            found.append(
                f"pool {tagged_pool} group {group} launched {launched} > N={limit.n} instances"
            )
    leaked = world.detached_enis - enis_before
    if leaked:
        found.append(f"detached ENIs left behind: {sorted(leaked)}")
    return found


def cost_problems(
    instances: list[dict[str, Any]],
    gang_sizes: Mapping[str, int],
    served: Collection[Gang],
    now: datetime,
) -> list[str]:
    """Stranded node-seconds no run may have, as sentences. `instances` is EC2's history
    (DescribeInstances, terminated ones included), `gang_sizes` each pool's N, `served` the
    gangs a Workload was admitted onto. A partial set (a short answer rolled back) is
    stranded too, but it is EC2's doing: only whole sets are judged here."""
    lives = [instance_life(raw) for raw in instances]

    def size(gang: Gang) -> int:
        return gang_sizes.get(gang.pool or "", 0)

    bills = bill(lives, size, now, served.__contains__)

    def was_whole(gang: Gang) -> bool:
        # Judged alone: a gang whole only beside an older one of its pool was whole too.
        return any(whole_intervals([x for x in lives if x.gang == gang], size, now)[gang])

    def stranded(gang: Gang) -> float:
        return sum(bills[x.instance_id].stranded for x in lives if x.gang == gang)

    found: list[str] = []
    for gang in never_served(lives, served.__contains__, now):
        if was_whole(gang):
            found.append(
                f"pool {gang.pool} group {gang.group}: a whole set ended without serving a "
                f"Workload ({stranded(gang):.0f} node-seconds stranded)"
            )
    for overlap in overlaps(lives, size, now, served.__contains__):
        younger = overlap.younger
        found.append(
            f"pool {younger.pool}: groups {overlap.older.group} and {younger.group} ran whole "
            f"at once for {overlap.seconds:.0f} s ({stranded(younger):.0f} node-seconds of "
            f"{younger.group} stranded)"
        )
    return found
