"""Reaper sweep over a large managed fleet: time to list, judge and terminate.

    .venv/bin/python -m bench.bench_reaper [--instances 10000]
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
Prints each as total seconds and per 1,000 instances. The EC2 side is moto in this process,
not AWS: the figures bound the controller's own cost plus an in-memory EC2, not network
latency. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import boto3  # type: ignore[import-untyped]
from moto import mock_aws

from provisioner.api import constants as c
from provisioner.cloud import Ec2Engine
from provisioner.cloud.ec2api import build_clients
from provisioner.cloud.types import InstanceView
from provisioner.cloud.views import instance_view_from
from provisioner.controllers.reaper import PoolFacts, Reaper, verdict
from provisioner.devenv.emulator_patches import install

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


class _NoWait:
    """The engine's clock; a release here never waits on ENI detaches."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        pass


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
    left = count
    ids: list[str] = []
    while left:
        n = min(BATCH, left)
        out = ec2.run_instances(  # type: ignore[attr-defined]
            ImageId=ami, InstanceType=INSTANCE_TYPE, MinCount=n, MaxCount=n, TagSpecifications=spec
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
                pools[pool] = PoolFacts(phase=c.PHASE_SATISFIED, claimed=False)
    return pools, planned


def _judge(instances: Sequence[InstanceView], pools: dict[str, PoolFacts], now: datetime):
    doomed: dict[str, list[str]] = {}
    for inst in instances:
        reason = verdict(inst, pools, now, timedelta(seconds=120))
        if reason is not None:
            doomed.setdefault(reason, []).append(inst.instance_id)
    return doomed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument(
        "--list-sample",
        type=int,
        default=1_000,
        help="fleet size for the full sweep with listing (moto's tag filter is superlinear)",
    )
    args = parser.parse_args(argv)
    total = args.instances
    # The reaper logs every id it terminates; thousands of them would bury the figures.
    logging.getLogger("provisioner.controllers.reaper").setLevel(logging.ERROR)

    # 1. A full sweep, listing included, on a fleet moto can list in reasonable time.
    with mock_aws():
        engine, ec2, ami = _world(args.list_sample + BATCH)
        pools, planned = _fleet(ec2, ami, args.list_sample)
        # Just past the 1 s max-lifetime of the instances launched to expire.
        now = datetime.now(UTC) + timedelta(seconds=10)
        t0 = time.perf_counter()
        listed = engine.find_managed(CLUSTER)
        t_list = time.perf_counter() - t0
        template = ec2.describe_instances(InstanceIds=[listed[0].instance_id])  # type: ignore[attr-defined]
        raw_template = template["Reservations"][0]["Instances"][0]
        reaper = Reaper(engine, CLUSTER, lambda: pools, 120.0, lambda: now)
        t0 = time.perf_counter()
        first = reaper.sweep()
        t_sweep = time.perf_counter() - t0
        t0 = time.perf_counter()
        steady = reaper.sweep()
        t_steady = time.perf_counter() - t0
    doomed_first = sum(map(len, first.terminated.values()))
    print(f"Full sweep, {args.list_sample} managed instances {dict(planned)}:")
    print(_line("list (paged DescribeInstances by tag + views)", t_list, args.list_sample))
    print(_line(f"first sweep: list, judge, release {doomed_first}", t_sweep, first.examined))
    print(_line(f"steady sweep ({steady.examined} left, nothing to do)", t_steady, steady.examined))

    # 2. The controller's own work at full size: typed views from DescribeInstances
    #    answers, then the verdict, for every instance.
    raws = []
    kinds = [k for k, (share, _, _, _) in KINDS.items() for _ in range(round(share * 100))]
    for i in range(total):
        kind = kinds[i % len(kinds)]
        _, lifetime, keep_warm, _ = KINDS[kind]
        pool = f"{kind}-{i % 50}"
        raw = dict(raw_template, InstanceId=f"i-{i:017x}")
        raw["Tags"] = [
            {"Key": c.TAG_MANAGED, "Value": "true"},
            {"Key": c.TAG_CLUSTER, "Value": CLUSTER},
            {"Key": c.TAG_POOL, "Value": pool},
            {"Key": c.TAG_GROUP, "Value": "gen-1"},
            {"Key": c.TAG_MAX_LIFETIME, "Value": lifetime},
            {"Key": c.TAG_KEEP_WARM_UNTIL, "Value": keep_warm},
        ]
        raws.append(raw)
    big_pools = {
        f"{k}-{j}": PoolFacts(phase=c.PHASE_SATISFIED, claimed=False)
        for k, (_, _, _, exists) in KINDS.items()
        if exists
        for j in range(50)
    }
    t0 = time.perf_counter()
    views = [instance_view_from(r) for r in raws]
    t_views = time.perf_counter() - t0
    t0 = time.perf_counter()
    doomed = _judge(views, big_pools, now)
    t_verdict = time.perf_counter() - t0
    n_doomed = sum(map(len, doomed.values()))
    print(f"\nController work at {total} instances (no EC2 calls):")
    print(_line("typed views from DescribeInstances answers", t_views, total))
    print(_line(f"verdict over all ({n_doomed} doomed)", t_verdict, total))

    # 3. The batched terminate at full size against moto.
    with mock_aws():
        engine, ec2, ami = _world(total + BATCH)
        t0 = time.perf_counter()
        ids: list[str] = []
        _fleet(ec2, ami, total, ids)
        t_setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        for k in range(0, len(ids), TERMINATE_BATCH):
            ec2.terminate_instances(InstanceIds=ids[k : k + TERMINATE_BATCH])  # type: ignore[attr-defined]
        t_term = time.perf_counter() - t0
    print(f"\nTerminate at {total} instances (fleet launched in {t_setup:.0f} s, not measured):")
    calls = -(-len(ids) // TERMINATE_BATCH)
    print(_line(f"TerminateInstances x{calls} for {len(ids)}", t_term, len(ids)))
    print("\nEC2 here is moto in this process: listing cost is moto's tag filter, not AWS.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
