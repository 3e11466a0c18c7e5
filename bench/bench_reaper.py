"""Reaper sweep over a large managed fleet: time to list, judge and terminate.

    .venv/bin/python -m bench.bench_reaper [--instances 10000] [--record]
    (part of make bench)

Runs in-process moto with the project's emulator patches, launches `--instances` managed
instances of one cluster tagged as the controller tags them, in four kinds: healthy (pool
exists, within lifetime), orphaned (pool gone), past max-lifetime, and past an expired
keep-warm tag. Then it times, with the project's own code:
1. `find_managed` (paged DescribeInstances by tag) and building the typed views;
2. `reaper.verdict` over every instance;
3. `Ec2Engine.release` of the doomed ones (ENI bookkeeping + TerminateInstances in batches
   of 100);
4. a second, steady-state `Reaper.sweep` that finds nothing more to do.
Runs a --baseline fleet (1,000) and the full one (10,000) side by side and prints each step
in seconds, per 1,000 instances, and the ratio between the two (10x means linear). The EC2
side is moto in this process, not AWS: the figures bound the controller's own cost plus an
in-memory EC2, with its request buckets off (a 10,000-instance fleet cannot be launched
inside RunInstances' resource bucket in the bench's time), not network latency or the
account's rate. Figures, not assertions: each run prints them beside
`bench/baselines/bench_reaper.json` (`--record` keeps the run's).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import boto3  # type: ignore[import-untyped]
from moto import mock_aws

from bench import baselines
from bench.stats import ratio, table
from devenv.emulator import install
from provisioner.api import constants as c
from provisioner.api.clock import SystemClock
from provisioner.api.constants import Phase
from provisioner.cloud import Ec2Engine, naming
from provisioner.cloud.ec2api import build_clients
from provisioner.cloud.ownership import prove
from provisioner.cloud.types import InstanceView
from provisioner.cloud.views import instance_view_from
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.reaper import PoolFacts, Reaper, verdict

REGION = "us-east-1"
CLUSTER = "bench"
INSTANCE_TYPE = "m5.large"
BATCH = 500
TERMINATE_BATCH = 100  # release.py's chunk: TerminateInstances takes up to 1,000 ids
# Kind: (share of the fleet, max-lifetime tag, keep-warm tag, pool exists)
KINDS = {
    "healthy": (0.40, "4h0m0s", "", True),
    "orphaned": (0.30, "4h0m0s", "", False),
    "max-lifetime": (0.15, "1s", "", True),
    "keep-warm-expired": (0.15, "4h0m0s", "2020-01-01T00:00:00Z", True),
}


class _NoWait(SystemClock):
    """The engine's clock; a release here never waits on ENI detaches."""

    def sleep(self, seconds: float) -> None:
        pass


# Launch tokens are signed as the controller signs them, so the sweep proves them ours.
KEY = naming.OwnershipKey(b"bench-ownership-key-of-32-bytes!")
# limits.maxLifetime's default: the reaper never lets an instance live longer.
MAX_LIFETIME = timedelta(hours=168)


def _uid(pool: str) -> str:
    return f"uid-{pool}"


def _launch(ec2: object, ami: str, count: int, kind: str, pool: str) -> list[str]:
    _, lifetime, keep_warm, _ = KINDS[kind]
    tags = {
        c.TAG_MANAGED: "true",
        c.TAG_CLUSTER: CLUSTER,
        c.TAG_POOL: pool,
        c.TAG_GROUP: "gen-1",
        c.TAG_MAX_LIFETIME: lifetime,
        c.TAG_KEEP_WARM_UNTIL: keep_warm,
    }
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    # One pool per subnet in turn: a 10,000-instance fleet needs more addresses than one
    # default subnet (a /20, 4,091) has, and EC2, like moto, refuses a launch past them.
    subnets = sorted(s["SubnetId"] for s in ec2.describe_subnets()["Subnets"])  # type: ignore[attr-defined]
    subnet = subnets[zlib.crc32(pool.encode()) % len(subnets)]
    left = count
    ids: list[str] = []
    while left:
        n = min(BATCH, left)
        token = naming.client_token(_uid(pool), 1, subnet, key=KEY, cluster=CLUSTER, pool=pool)
        out = ec2.run_instances(  # type: ignore[attr-defined]
            ImageId=ami,
            InstanceType=INSTANCE_TYPE,
            MinCount=n,
            MaxCount=n,
            TagSpecifications=spec,
            SubnetId=subnet,
            ClientToken=token,
        )
        ids += [i["InstanceId"] for i in out["Instances"]]
        left -= n
    return ids


def _line(what: str, seconds: float, per: int) -> str:
    per_k = seconds / per * 1000 if per else 0.0
    return f"  {what:<46}{seconds:>9.2f} s{per_k:>11.3f} s / 1,000 instances"


def _world(free: int) -> tuple[Ec2Engine, object, str]:
    emu = install()
    emu.reset()
    emu.set_default_free(free)
    # EC2's request buckets off: inside RunInstances' resource bucket (1,000 instances, 2 a
    # second) a 10,000-instance fleet would take over an hour to launch, and with them on the
    # set-up was refused (RequestLimitExceeded) before anything was measured. The figures are
    # the sweep's own cost, not the account's rate.
    emu.set_throttling(enabled=False)
    session = boto3.Session(
        aws_access_key_id="bench", aws_secret_access_key="bench", region_name=REGION
    )
    clients = build_clients(session, REGION, max_attempts=1)
    engine = Ec2Engine(clients, _NoWait())
    ami = engine.resolve_ami(k8s_version="1.33", instance_type=INSTANCE_TYPE, variant="standard")
    return engine, clients.ec2, ami.ami_id


def _fleet(
    ec2: object, ami: str, total: int, doomed: list[str] | None = None
) -> tuple[dict[str, PoolFacts], Counter[str]]:
    """Launch the fleet; the ids of kinds the reaper must take go into `doomed`."""
    planned: Counter[str] = Counter()
    pools: dict[str, PoolFacts] = {}
    for kind, (share, _, _, exists) in KINDS.items():
        count = round(total * share)
        planned[kind] = count
        # Big pools keep the set-up to a few launch calls; the sweep does not care.
        for p in range(0, count, BATCH):
            pool = f"{kind}-{p // BATCH}"
            ids = _launch(ec2, ami, min(BATCH, count - p), kind, pool)
            if doomed is not None and kind != "healthy":
                doomed += ids
            if exists:
                # A set whose keep-warm window is over is a warm pool's: the reaper leaves
                # alone a set in a phase that serves a gang, whatever its tag says.
                phase = Phase.KEEP_WARM if kind == "keep-warm-expired" else Phase.SATISFIED
                pools[pool] = PoolFacts(phase=phase, claimed=False, uid=_uid(pool))
    return pools, planned


def _judge(instances: Sequence[InstanceView], pools: dict[str, PoolFacts], now: datetime):
    doomed: dict[str, list[str]] = {}
    for inst in instances:
        facts = pools.get(inst.managed.pool or "")
        proof = prove(
            inst,
            cluster=CLUSTER,
            pool_uid=facts.uid if facts else None,
            key=KEY,
            fleet_tokens={},
        )
        reason = verdict(
            inst, proof.standing, pools, now, timedelta(seconds=120), max_lifetime=MAX_LIFETIME
        )
        if reason is not None:
            doomed.setdefault(reason, []).append(inst.instance_id)
    return doomed


def _sweep_at(size: int) -> dict[str, float]:
    """One fleet of `size`: listing, a first sweep that releases the doomed, a steady sweep,
    and the controller's own share (typed views and verdicts, no EC2 calls)."""
    figures: dict[str, float] = {"size": size}
    with mock_aws():
        engine, ec2, ami = _world(size + BATCH)
        t0 = time.perf_counter()
        pools, _ = _fleet(ec2, ami, size)
        figures["setup"] = time.perf_counter() - t0
        # Past the 1 s max-lifetime of the instances launched to expire, and past the one
        # sweep interval (120 s) a just-launched instance gets before it can be an orphan.
        now = datetime.now(UTC) + timedelta(minutes=10)
        t0 = time.perf_counter()
        listed = engine.find_managed(CLUSTER)
        figures["list"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        _judge(listed, pools, now)
        figures["verdict"] = time.perf_counter() - t0
        # Every page of the same listing, as EC2's answers, to time the views alone.
        pages = ec2.get_paginator("describe_instances").paginate(  # type: ignore[attr-defined]
            Filters=[{"Name": f"tag:{c.TAG_CLUSTER}", "Values": [CLUSTER]}]
        )
        answers = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
        assert len(answers) == len(listed), "the views step reads what find_managed listed"
        t0 = time.perf_counter()
        for answer in answers:
            instance_view_from(answer)
        figures["views"] = time.perf_counter() - t0
        reaper = Reaper(
            engine,
            CLUSTER,
            lambda: pools,
            120.0,
            lambda: now,
            ControllerMetrics(),
            cache_problem=lambda: None,
            ownership_key=KEY,
            max_lifetime=MAX_LIFETIME,
            # The bench's fleet has no launch templates or groups to prove.
            stack_record=lambda _pool: frozenset(),
        )
        t0 = time.perf_counter()
        first = reaper.sweep()
        figures["sweep"] = time.perf_counter() - t0
        figures["released"] = sum(map(len, first.terminated.values()))
        t0 = time.perf_counter()
        steady = reaper.sweep()
        figures["steady"] = time.perf_counter() - t0
        figures["left"] = steady.examined
    return figures


ROWS = [
    ("list (paged DescribeInstances by tag + typed views)", "list"),
    ("  of which typed views (controller code)", "views"),
    ("verdict over every instance (controller code)", "verdict"),
    ("first sweep: list, judge, release the doomed", "sweep"),
    ("steady sweep: list, judge, nothing to release", "steady"),
]


def key_figures(by_fleet: dict[int, dict[str, float]]) -> dict[str, float]:
    """Per fleet size, each step's seconds (`ROWS`) and what the sweeps released and left."""
    return {
        f"{n:,} instances: {key}{' s' if key in dict(ROWS).values() else ''}": figures[key]
        for n, figures in by_fleet.items()
        for key in (*(key for _, key in ROWS), "released", "left")
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--baseline", type=int, default=1_000, help="the smaller fleet")
    parser.add_argument(
        "--record", action="store_true", help="keep this run's figures as the bench's baseline"
    )
    args = parser.parse_args(argv)
    ran_on = baselines.commit()  # what the figures measure, whatever is committed meanwhile
    # The reaper logs every id it terminates; thousands of them would bury the figures.
    logging.getLogger("provisioner.controllers.reaper").setLevel(logging.ERROR)
    small, big = (_sweep_at(n) for n in (args.baseline, args.instances))
    print(
        f"Reaper sweep, fleets of {args.baseline:,} and {args.instances:,} managed instances "
        f"({', '.join(f'{k} {v[0]:.0%}' for k, v in KINDS.items())}):"
    )
    header = (
        "step",
        f"{args.baseline:,} s",
        f"{args.instances:,} s",
        f"s / 1,000 at {args.instances:,}",
        "ratio",
    )
    rows = [
        [
            label,
            f"{small[key]:.2f}",
            f"{big[key]:.2f}",
            f"{big[key] / args.instances * 1000:.3f}",
            ratio(big[key], small[key]),
        ]
        for label, key in ROWS
    ]
    print(table(header, rows))
    print(
        f"released {small['released']:.0f} and {big['released']:.0f}; "
        f"{small['left']:.0f} and {big['left']:.0f} left healthy; fleet set-up (not measured) "
        f"{small['setup']:.0f} s and {big['setup']:.0f} s"
    )
    print(
        f"ratio = {args.instances // args.baseline}x the fleet means linear. EC2 here is moto "
        "in this process: the listing and release figures are moto's, not AWS latency."
    )
    figures = key_figures({args.baseline: small, args.instances: big})
    baselines.compare_and_record("bench_reaper", figures, record_run=args.record, ran_on=ran_on)
    return 0


if __name__ == "__main__":
    sys.exit(main())
