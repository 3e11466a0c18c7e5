"""`bench_scarcity`'s budget rows: P pools waiting at once, each on its own copy of the trace,
retrying at the controller's account-wide launch budget (`controllers.launch_budget`).

Each pool is a gang of N in a (zone, instance type) of its own, so the pools compete for
nothing but the account's EC2 throttling, which the emulator enforces as EC2 documents it
(`devenv.emulator.throttling`, on with EC2's default buckets): what the budget must keep
them inside while every pool retries as often as it allows. A pool asks the product's
`LaunchBudget` for its turn, launches through the product's engine when given it, gives the
instances back on a shortfall and asks again; a `RequestLimitExceeded` would shrink the
budget. Per run it reports each gang's start, the bill against the useful work, the
stranded node-seconds, the calls the emulator refused, and the EC2 calls per started gang.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from unittest import mock

import boto3  # type: ignore[import-untyped]
import moto.ec2.models.instances as moto_instances
from moto import mock_aws
from moto.ec2.models.instance_types import INSTANCE_TYPES

from bench.bench_scarcity import (
    CLUSTER,
    EPOCH,
    HORIZON,
    REGION,
    CallCounter,
    VirtualClock,
    ec2_history,
    slots_at,
)
from devenv.emulator import install
from provisioner.api.settings import LaunchBudgetSettings
from provisioner.cloud import Ec2Engine, LaunchSpec, SubnetRef
from provisioner.cloud.billing import bill
from provisioner.cloud.ec2api import build_clients
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.controllers.launch_budget import LaunchBudget, LaunchCost


def gpu_types() -> list[str]:
    """x86-64 GPU types moto knows (the NVIDIA AMI's architecture), in a stable order."""
    return sorted(
        name
        for name, info in INSTANCE_TYPES.items()
        if name[0] in "pg"
        and "x86_64" in info.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
    )


@dataclass
class Pool:
    name: str
    zone: str
    instance_type: str
    subnet: SubnetRef
    generation: int = 1
    next_ask: float = 0.0
    attempts: int = 0
    held: int = 0
    started_at: float | None = None


@dataclass(frozen=True)
class PoolsOutcome:
    pools: int
    starts: tuple[float | None, ...]
    billed: float
    stranded: float
    useful: float
    calls: int
    attempts: int
    throttled: int
    budget_throttles: int

    @property
    def started(self) -> int:
        return sum(1 for s in self.starts if s is not None)

    @property
    def last_start(self) -> float | None:
        starts = [s for s in self.starts if s is not None]
        return max(starts) if len(starts) == len(self.starts) else None

    @property
    def median_start(self) -> float | None:
        starts = [s for s in self.starts if s is not None]
        return statistics.median(starts) if starts else None


def _step(pool: Pool, count: int, ami: str, world: Any) -> None:
    clock, budget, engine = world.clock, world.budget, world.engine
    now = clock.now()
    cost = LaunchCost(calls=1, instances=count)
    turn = budget.turn(REGION, pool.name, cost, now)
    if not turn.go:
        pool.next_ask = clock.t + turn.wait
        return
    pool.attempts += 1
    spec = LaunchSpec(
        pool_name=pool.name,
        pool_uid=f"0b7c5a8e-0000-4000-8000-{pool.name[-12:]:0>12}",
        acquire_generation=pool.generation,
        cluster_name=CLUSTER,
        count=count,
        instance_type=pool.instance_type,
        mode="runinstances",
        subnets=(pool.subnet,),
        ami_id=ami,
    )
    try:
        engine.acquire(spec)
    except CloudError as err:
        budget.finished(REGION, pool.name, cost, err.calls, now)
        if err.throttled:
            budget.throttled(REGION, now)
        elif err.kind is ErrorKind.CAPACITY:
            pool.generation += 1
            budget.shortfall(REGION, cost, now)
        else:
            raise
        pool.next_ask = clock.t  # its next turn: the next tick asks for it
        return
    budget.finished(REGION, pool.name, cost, 1, now)
    pool.held = count
    pool.started_at = clock.t


@dataclass
class _World:
    clock: VirtualClock
    budget: LaunchBudget
    engine: Ec2Engine


def replay_pools(pools: int, count: int, tick: float, job: float) -> PoolsOutcome:
    clock = VirtualClock()
    with mock_aws(), mock.patch.object(moto_instances, "utcnow", clock.moto_utcnow):
        emu = install()
        emu.reset()
        emu.clock = clock.monotonic  # EC2's buckets refill on the virtual clock too
        session = boto3.Session(
            aws_access_key_id="bench", aws_secret_access_key="bench", region_name=REGION
        )
        clients = build_clients(session, REGION, max_attempts=1)
        engine = Ec2Engine(clients, clock)
        types = gpu_types()
        ami = engine.resolve_ami(k8s_version="1.33", instance_type=types[0], variant="nvidia")
        subnets = emu.subnets(REGION)
        zones = sorted(subnets)
        if pools > len(zones) * len(types):
            raise SystemExit(f"at most {len(zones) * len(types)} pools: one (zone, type) each")
        fleet = [
            Pool(
                name=f"scarce-{i:03d}",
                zone=zones[i % len(zones)],
                instance_type=types[i // len(zones)],
                subnet=SubnetRef(subnets[zones[i % len(zones)]], zones[i % len(zones)]),
            )
            for i in range(pools)
        ]
        for zone in zones:
            for itype in {p.instance_type for p in fleet}:
                emu.set_capacity(zone, itype, 0)
        world = _World(clock, LaunchBudget(LaunchBudgetSettings()), engine)
        counter = CallCounter(clients)
        free: dict[str, int] = {}
        while clock.t <= HORIZON and any(p.started_at is None for p in fleet):
            for pool in fleet:
                room = max(0, slots_at(clock.t) - pool.held)
                if free.get(pool.name) != room:
                    emu.set_capacity(pool.zone, pool.instance_type, room)
                    free[pool.name] = room
            for pool in fleet:
                if pool.started_at is None and clock.t >= pool.next_ask:
                    _step(pool, count, ami.ami_id, world)
            clock.t += tick
        calls = counter.calls
        lives = ec2_history(clients.ec2)
        billed = stranded = useful = 0.0
        for pool in fleet:
            end = (pool.started_at if pool.started_at is not None else HORIZON) + job
            mine = [life for life in lives if life.pool == pool.name]
            bills = bill(mine, lambda _: count, EPOCH + timedelta(seconds=end)).values()
            billed += sum(b.billed for b in bills)
            stranded += sum(b.stranded for b in bills)
            useful += count * job if pool.started_at is not None else 0.0
        return PoolsOutcome(
            pools=pools,
            starts=tuple(p.started_at for p in fleet),
            billed=billed,
            stranded=stranded,
            useful=useful,
            calls=calls,
            attempts=sum(p.attempts for p in fleet),
            throttled=int(emu.throttling_report()["total"]),
            budget_throttles=world.budget.throttles(REGION),
        )


def print_rows(outcomes: list[PoolsOutcome], hoarder: Any) -> dict[str, float]:
    """The budget rows beside the best hoarding launcher (the earliest start of the
    launchers that keep partial sets): start, bill, strand, throttling, calls per gang.
    Returns the figures, by name, for the bench's baseline."""
    figures: dict[str, float] = {}
    best = hoarder.time_to_start
    print(
        f"\nThe launch budget (launchBudget defaults: half of EC2's buckets), P pools waiting "
        f"at once, each on its own copy of the trace; best hoarding launcher: {hoarder.name}, "
        f"start {best:.0f} s."
    )
    head = (
        f"{'pools':>6}{'last start s':>14}{'median s':>10}{'vs hoarder':>12}"
        f"{'billed/useful':>15}{'stranded':>10}{'throttled':>11}{'calls/gang':>12}"
        f"{'launches':>10}"
    )
    print(head)
    print("-" * len(head))
    for o in outcomes:
        last, median = o.last_start, o.median_start
        ratio = "n/a" if last is None or not best else f"{last / best:.3f}x"
        per_gang = o.calls / o.started if o.started else float("nan")
        print(
            f"{o.pools:>6}{'never' if last is None else f'{last:.0f}':>14}"
            f"{'n/a' if median is None else f'{median:.0f}':>10}{ratio:>12}"
            f"{o.billed / o.useful if o.useful else float('nan'):>15.2f}{o.stranded:>10.0f}"
            f"{o.throttled:>11}{per_gang:>12.1f}{o.attempts:>10}"
        )
        row = f"budget, {o.pools} pools"
        if last is not None:
            figures[f"{row}: last start s"] = last
        if o.useful:
            figures[f"{row}: billed / useful"] = o.billed / o.useful
        figures[f"{row}: stranded node-s"] = o.stranded
        figures[f"{row}: throttled calls"] = o.throttled
        if o.started:
            figures[f"{row}: EC2 calls per gang"] = per_gang
    print(
        "  throttled: calls the emulator refused with RequestLimitExceeded (EC2's documented "
        "buckets, on by default); calls/gang: every EC2/SSM call the pools made, per gang "
        "started; launches: RunInstances attempts."
    )
    return figures
