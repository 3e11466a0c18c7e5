"""Cost under scarcity: one capacity trace, three ways to launch a gang of N, side by side.

    .venv/bin/python -m bench.bench_scarcity [--count 4] [--tick 5] [--job-seconds 600]
        [--plot docs/scarcity.png]
    (make bench-scarcity, which writes docs/scarcity.png)

Runs in-process moto with the project's emulator patches (`devenv.emulator`)
and a virtual clock, so the figures are the same on every run and every machine. Each
launcher gets a fresh emulator and the same capacity trace, replayed tick by tick:
- **atomic-gang**: this project's engine, `Ec2Engine.acquire` (MinCount = MaxCount = N, or an
  instant fleet with MinTargetCapacity = N), retried after a shortfall with the backoff the
  controller used before its launch budget (5 s doubling to 300 s), a new generation each try;
- **the launch budget** (`bench.scarcity_budget`): 1, 10 and 100 pools (`--pools`) waiting at
  once, retrying at the controller's account-wide launch budget, with the emulator enforcing
  EC2's documented throttling;
- **incremental**: RunInstances with MinCount = MaxCount = 1, again and again, keeping every
  instance it gets until it holds N;
- **best-effort**: RunInstances for N with MinCount = 1, topping up the remainder on every
  poll, keeping the partial set until a timeout, then terminating it all and starting over.

The trace is the number of instances of the type this tenant could hold in its one zone at
each moment (other tenants take the rest): a launcher holding k sees max(0, trace - k) free
slots, and a dip below what it holds takes nothing away (on-demand is not reclaimed).

Every launcher is billed the same way, by the product's one definition
(`provisioner.cloud.billing`, as the demo bills its pools): from EC2's history of every
instance it ever launched, rolled back or not, found by DescribeInstances over all states
(paged, by the cluster tag every launcher writes). Moto stamps LaunchTime and the
termination time in StateTransitionReason from its own `utcnow`; the replay points that at
the virtual clock, so the history reads in virtual seconds. Per launcher it prints
node-seconds billed (per second, 60 s minimum, until the job ends `--job-seconds` after the
gang starts), node-seconds stranded (billed outside the time the whole gang ran), time to
start (all N running; node join time is the same for every launcher and left out),
instances launched (as EC2 lists them) and EC2/SSM calls made (counted by a botocore hook
on the launcher's clients, from its first step to the job's start); then the ratios against
atomic-gang. `--plot PATH` draws the trace (`bench.scarcity_plot`). Figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import boto3  # type: ignore[import-untyped]
import moto.ec2.models.instances as moto_instances
from moto import mock_aws

from bench import baselines
from bench.scarcity_plot import Lane, counts_over_time, draw
from devenv.emulator import EmulatorState, install
from provisioner.api import constants as c
from provisioner.api.settings import RetryBackoff
from provisioner.cloud import Ec2Engine, LaunchSpec, LaunchTemplateRef, SubnetRef
from provisioner.cloud.billing import InstanceLife, bill, instance_life
from provisioner.cloud.ec2api import CloudClients, build_clients
from provisioner.cloud.errors import CloudError, ErrorKind

REGION = "us-east-1"
ZONE = "us-east-1a"
INSTANCE_TYPE = "p4d.24xlarge"
CLUSTER = "bench"
EPOCH = datetime(2030, 1, 1, tzinfo=UTC)
# The controller's retry schedule after a shortfall, read from the setting's defaults so the
# bench follows the product if they change.
BACKOFF_BASE = RetryBackoff().initial.total_seconds()
BACKOFF_MAX = RetryBackoff().max.total_seconds()

# (seconds from start, instances this tenant could hold from then on). Rising 0→1→2→3, a
# dip, a one-minute window of 4, another dip, then 4 for good.
TRACE: tuple[tuple[float, int], ...] = (
    (0, 0),
    (120, 1),
    (300, 2),
    (540, 3),
    (840, 2),
    (1020, 1),
    (1140, 3),
    (1380, 4),
    (1440, 3),
    (1620, 2),
    (1800, 3),
    (2100, 4),
)
HORIZON = 4 * 3600.0
RECORD_HELP = "keep this run's figures as bench/baselines/bench_scarcity.json"


def slots_at(t: float, trace: Sequence[tuple[float, int]] = TRACE) -> int:
    held = 0
    for start, slots in trace:
        if t >= start:
            held = slots
    return held


class VirtualClock:
    """The engine's clock: `sleep` moves time, nothing waits."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=self.t)

    def moto_utcnow(self) -> datetime:
        """Moto's `utcnow` (naive UTC), which stamps LaunchTime and termination reasons."""
        return self.now().replace(tzinfo=None)

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> datetime:
        return self.now()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        self.sleep(timeout or 0.0)


@dataclass
class Ledger:
    """What a launcher believes it holds: it decides its next call, and the replay sizes the
    free capacity by it. The bill is not read from here but from EC2's history."""

    launched: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    started_at: float | None = None  # when N ran at once

    def held(self) -> list[str]:
        return [i for i in self.launched if i not in self.ended]


class CallCounter:
    """Counts every API call the clients make (botocore's `before-call`, once per call)."""

    def __init__(self, clients: CloudClients) -> None:
        self.calls = 0
        # The ports name only the calls the product makes; these are boto3 clients.
        boto_clients: tuple[Any, ...] = (clients.ec2, clients.ssm, clients.eks, clients.iam)
        for client in boto_clients:
            client.meta.events.register("before-call", self._count)

    def _count(self, **_: Any) -> None:
        self.calls += 1


@dataclass
class World:
    emu: EmulatorState
    ec2: Any
    engine: Ec2Engine
    clock: VirtualClock
    subnet: SubnetRef
    ami_id: str
    template: LaunchTemplateRef
    ledger: Ledger = field(default_factory=Ledger)

    def run(self, min_count: int, max_count: int) -> list[str]:
        try:
            out = self.ec2.run_instances(
                ImageId=self.ami_id,
                InstanceType=INSTANCE_TYPE,
                MinCount=min_count,
                MaxCount=max_count,
                SubnetId=self.subnet.subnet_id,
                # The product's cluster tag, so the bill finds them as it finds the engine's.
                TagSpecifications=[
                    {
                        "ResourceType": "instance",
                        "Tags": [{"Key": c.TAG_CLUSTER, "Value": CLUSTER}],
                    }
                ],
            )
        except self.ec2.exceptions.ClientError as err:
            if err.response["Error"]["Code"] == "InsufficientInstanceCapacity":
                return []
            raise
        ids = [str(i["InstanceId"]) for i in out["Instances"]]
        for i in ids:
            self.ledger.launched[i] = self.clock.t
        return ids

    def terminate(self, ids: Sequence[str]) -> None:
        if ids:
            self.ec2.terminate_instances(InstanceIds=list(ids))
            for i in ids:
                self.ledger.ended[i] = self.clock.t


# --- the launchers: `step` acts at the current virtual time, True once N run -------------


class AtomicGang:
    name = "atomic-gang"

    def __init__(
        self,
        world: World,
        count: int,
        mode: str = "runinstances",
        backoff: tuple[float, float] = (BACKOFF_BASE, BACKOFF_MAX),
    ) -> None:
        self.w, self.n, self.mode = world, count, mode
        self.generation, self.shortfalls, self.next_try = 1, 0, 0.0
        self.backoff_base, self.backoff_max = backoff
        self.name = f"atomic-gang ({mode})"
        if backoff != (BACKOFF_BASE, BACKOFF_MAX):
            self.name = f"atomic-gang ({mode}, max {backoff[1]:g}s)"

    def step(self) -> bool:
        if self.w.clock.t < self.next_try:
            return False
        spec = LaunchSpec(
            pool_name="scarce",
            pool_uid="0b7c5a8e-0000-4000-8000-00000000beef",
            acquire_generation=self.generation,
            cluster_name=CLUSTER,
            count=self.n,
            instance_type=INSTANCE_TYPE,
            mode=self.mode,  # type: ignore[arg-type]
            subnets=(self.w.subnet,),
            ami_id=self.w.ami_id,
            # Fleet mode takes user data and interfaces only from the pool's template.
            launch_template=self.w.template if self.mode == "fleet" else None,
        )
        try:
            result = self.w.engine.acquire(spec)
        except CloudError as err:
            if err.kind is not ErrorKind.CAPACITY:
                raise
            self.generation += 1
            self.shortfalls += 1
            delay = min(self.backoff_max, self.backoff_base * 2 ** (self.shortfalls - 1))
            self.next_try = self.w.clock.t + delay
            return False
        for i in result.instance_ids:
            self.w.ledger.launched[i] = self.w.clock.t
        return True


class Incremental:
    name = "incremental"

    def __init__(self, world: World, count: int, poll: float) -> None:
        self.w, self.n, self.poll, self.next_try = world, count, poll, 0.0

    def step(self) -> bool:
        if self.w.clock.t < self.next_try:
            return False
        self.next_try = self.w.clock.t + self.poll
        while len(self.w.ledger.held()) < self.n:
            if not self.w.run(1, 1):
                return False
        return True


class BestEffort:
    name = "best-effort"

    def __init__(self, world: World, count: int, poll: float, timeout: float) -> None:
        self.w, self.n, self.poll, self.timeout = world, count, poll, timeout
        self.next_try = 0.0
        self.attempt_started: float | None = None
        self.rollbacks = 0

    def step(self) -> bool:
        t = self.w.clock.t
        if t < self.next_try:
            return False
        self.next_try = t + self.poll
        held = self.w.ledger.held()
        if self.attempt_started is not None and t - self.attempt_started >= self.timeout:
            self.w.terminate(held)
            self.rollbacks += 1
            self.attempt_started = None
            return False
        if self.attempt_started is None:
            self.attempt_started = t
        self.w.run(1, self.n - len(held))
        return len(self.w.ledger.held()) == self.n


# --- the replay ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    name: str
    billed: float
    stranded: float
    time_to_start: float | None
    calls: int
    note: str
    lives: tuple[InstanceLife, ...]  # EC2's history of every instance it launched
    job_end: float

    @property
    def launched(self) -> int:
        return len(self.lives)


def ec2_history(ec2: Any) -> list[InstanceLife]:
    """Every instance of the bench's cluster EC2 knows of, in any state, as lives."""
    raw: list[dict[str, Any]] = []
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:{c.TAG_CLUSTER}", "Values": [CLUSTER]}]
    )
    for page in pages:
        raw.extend(i for r in page["Reservations"] for i in r["Instances"])
    lives = [instance_life(i) for i in raw]
    if any(life.launched < EPOCH for life in lives):
        # Moto stopped stamping through the patched `utcnow`: the bill would be real time.
        raise RuntimeError("EC2's LaunchTime is not on the virtual clock; the bill is void")
    return lives


def replay(make: Callable[[World], Any], count: int, tick: float, job: float) -> Outcome:
    clock = VirtualClock()
    with mock_aws(), mock.patch.object(moto_instances, "utcnow", clock.moto_utcnow):
        emu = install()
        emu.reset()
        emu.clock = clock.monotonic
        for zone in emu.subnets(REGION):
            emu.set_capacity(zone, INSTANCE_TYPE, 0)
        session = boto3.Session(
            aws_access_key_id="bench", aws_secret_access_key="bench", region_name=REGION
        )
        clients = build_clients(session, REGION, max_attempts=1)
        engine = Ec2Engine(clients, clock)
        ami = engine.resolve_ami(k8s_version="1.33", instance_type=INSTANCE_TYPE, variant="nvidia")
        ec2: Any = clients.ec2  # the engine's port names only what the engine calls
        made = ec2.create_launch_template(
            LaunchTemplateName="atomic-gang-scarce",
            LaunchTemplateData={"ImageId": ami.ami_id, "InstanceType": INSTANCE_TYPE},
        )
        world = World(
            emu=emu,
            ec2=clients.ec2,
            engine=engine,
            clock=clock,
            subnet=SubnetRef(emu.subnets(REGION)[ZONE], ZONE),
            ami_id=ami.ami_id,
            template=LaunchTemplateRef(made["LaunchTemplate"]["LaunchTemplateId"]),
        )
        launcher = make(world)
        ledger = world.ledger
        counter = CallCounter(clients)  # from here: the launcher's calls only
        while clock.t <= HORIZON:
            held = len(ledger.held())
            emu.set_capacity(ZONE, INSTANCE_TYPE, max(0, slots_at(clock.t) - held))
            if launcher.step():
                ledger.started_at = clock.t
                break
            clock.t += tick
        calls = counter.calls
        job_end = (ledger.started_at if ledger.started_at is not None else HORIZON) + job
        lives = ec2_history(ec2)
        bills = bill(lives, lambda _: count, EPOCH + timedelta(seconds=job_end)).values()
        note = ""
        if isinstance(launcher, BestEffort):
            note = f"{launcher.rollbacks} rollbacks"
        elif isinstance(launcher, AtomicGang):
            note = f"{launcher.shortfalls} shortfalls"
        return Outcome(
            name=launcher.name,
            billed=sum(b.billed for b in bills),
            stranded=sum(b.stranded for b in bills),
            time_to_start=ledger.started_at,
            calls=calls,
            note=note,
            lives=tuple(lives),
            job_end=job_end,
        )


def plot(path: Path, outcomes: Sequence[Outcome], count: int, tick: float) -> None:
    end = max(o.job_end for o in outcomes)
    times = [i * tick for i in range(int(end // tick) + 1)]
    lanes = []
    for o in outcomes:
        running, stranded = counts_over_time(o.lives, count, EPOCH, o.job_end, times)
        lanes.append(Lane(o.name, running, stranded, o.billed, o.stranded))
    title = f"Gang of N={count} x {INSTANCE_TYPE} under one capacity trace (bench_scarcity)"
    draw(path, title, times, [slots_at(t) for t in times], lanes)


def _ratio(value: float, base: float) -> str:
    if base == 0:
        return "—" if value == 0 else "∞ (baseline 0)"
    return f"{value / base:.2f}x"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--count", type=int, default=4, help="gang size N")
    parser.add_argument("--tick", type=float, default=5.0, help="virtual seconds per step")
    parser.add_argument("--poll", type=float, default=10.0, help="baselines' poll interval")
    parser.add_argument("--timeout", type=float, default=300.0, help="best-effort timeout")
    parser.add_argument("--job-seconds", type=float, default=600.0)
    parser.add_argument(
        "--short-backoff-max",
        type=float,
        default=30.0,
        help="retryBackoff.max of the extra atomic-gang row (the setting an operator can lower)",
    )
    parser.add_argument("--plot", type=Path, help="write the trace as a PNG here (matplotlib)")
    parser.add_argument("--record", action="store_true", help=RECORD_HELP)
    parser.add_argument(
        "--pools",
        type=lambda text: [int(p) for p in text.split(",")],
        default=[1, 10, 100],
        help="the budget rows: how many pools wait at once, each on its own copy of the trace",
    )
    args = parser.parse_args(argv)
    ran_on = baselines.commit()  # what the figures measure, whatever is committed meanwhile
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    n, tick, job = args.count, args.tick, args.job_seconds
    launchers: list[Callable[[World], Any]] = [
        lambda w: AtomicGang(w, n, "runinstances"),
        lambda w: AtomicGang(w, n, "fleet"),
        lambda w: AtomicGang(w, n, "runinstances", (BACKOFF_BASE, args.short_backoff_max)),
        lambda w: Incremental(w, n, args.poll),
        lambda w: BestEffort(w, n, args.poll, args.timeout),
    ]
    print(f"Gang of N={n} x {INSTANCE_TYPE} in {ZONE}; tick {tick:g} s; job {job:g} s after start")
    print("Capacity trace (s from start: instances this tenant could hold): ", end="")
    print(", ".join(f"{int(t)}:{s}" for t, s in TRACE))
    print(
        f"Baselines poll every {args.poll:g} s; best-effort times out after {args.timeout:g} s; "
        f"atomic-gang backs off {BACKOFF_BASE:g} s doubling to {BACKOFF_MAX:g} s.\n"
    )
    outcomes = [replay(make, n, tick, job) for make in launchers]
    head = (
        f"{'launcher':<36}{'billed node-s':>14}{'stranded node-s':>17}"
        f"{'time to start s':>17}{'launched':>10}{'API calls':>11}  note"
    )
    print(head)
    print("-" * len(head))
    for o in outcomes:
        start = "never" if o.time_to_start is None else f"{o.time_to_start:.0f}"
        print(
            f"{o.name:<36}{o.billed:>14.0f}{o.stranded:>17.0f}{start:>17}"
            f"{o.launched:>10}{o.calls:>11}  {o.note}"
        )
    base = outcomes[0]
    print(f"\nRatios against {base.name}:")
    for o in outcomes[1:]:
        delay = (
            "n/a"
            if o.time_to_start is None or base.time_to_start is None
            else f"{o.time_to_start - base.time_to_start:+.0f} s"
        )
        print(
            f"  {o.name:<36} billed {_ratio(o.billed, base.billed)}, "
            f"stranded {o.stranded:.0f} vs {base.stranded:.0f} node-s, start {delay}"
        )
    useful = n * job
    print(f"\nUseful work in every case: {useful:.0f} node-s (N x job).")
    for o in outcomes:
        print(f"  {o.name:<36} billed / useful = {o.billed / useful:.2f}")
    # Deferred: the budget rows build on this module's replay helpers.
    from bench.scarcity_budget import print_rows, replay_pools

    hoarders = [o for o in outcomes[3:] if o.time_to_start is not None]
    best = min(hoarders, key=lambda o: o.time_to_start or 0.0)
    figures = print_rows([replay_pools(p, n, tick, job) for p in args.pools], best)
    for o in outcomes:
        if o.time_to_start is not None:
            figures[f"{o.name}: start s"] = o.time_to_start
        figures[f"{o.name}: billed / useful"] = o.billed / useful
    baselines.compare_and_record("bench_scarcity", figures, record_run=args.record, ran_on=ran_on)
    if args.plot is not None:
        plot(args.plot, outcomes, n, tick)
        print(f"\nTrace drawn to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
