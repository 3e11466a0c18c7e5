"""What the EC2 emulator's instance reads cost, moto's way and with its cost patches (P15,
P16), side by side on the same region of many pools' instances.

    .venv/bin/python -m bench.bench_emulator_reads [--pools 1000] [--count 2] [--calls 40]
        [--record]

The emulator shares the benches' two cores with the controller it stands beside, so what
its answers cost is CPU the controller does not get; on AWS it is no one's. moto runs in
this process (`mock_aws` with the emulator installed, throttling off), `--pools`
reservations of `--count` instances each are launched with a pool's tags, and each read
below is asked `--calls` times, first with moto's own code for the patched functions, then
with the emulator's, on the same instances. Printed: CPU milliseconds per call (this
process's, the client's share included, as the emulator's server would spend it) and the
ratio. The patches give moto's answers (`tests/unit/test_emulator_hot_paths.py`); only what
they cost is measured here. Figures, not assertions: nothing here fails on a slow machine.
Each run prints them beside `bench/baselines/bench_emulator_reads.json` (`--record` keeps
the run's).

Reads: one pool's live instances (the controller's listing: four tag filters and the state);
every instance of the cluster in every state, all its pages (the reaper's sweep); two
instances by an `instance-id` filter and by ids (a set's describe, the stack's record);
DescribeInstanceAttribute (moto's `get_instance`: what an ENI attachment and a tag read do).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Final

import boto3  # type: ignore[import-untyped]
from moto import mock_aws

from bench import baselines
from bench.stats import ratio, table
from devenv.emulator import install
from devenv.emulator.hot_paths import motos_own_reads
from provisioner.api import constants as c
from provisioner.cloud.views import ALL_STATES, describe_instances, find_managed

REGION: Final = "us-east-1"
CLUSTER: Final = "bench"
INSTANCE_TYPE: Final = "m5.large"


def _launch(ec2: Any, pools: int, count: int) -> list[list[str]]:
    image = ec2.describe_images()["Images"][0]["ImageId"]
    sets = []
    for n in range(pools):
        tags = {
            c.TAG_MANAGED: "true",
            c.TAG_CLUSTER: CLUSTER,
            c.TAG_POOL: f"pool-{n}",
            c.TAG_GROUP: f"group-{n}",
        }
        launched = ec2.run_instances(
            ImageId=image,
            MinCount=count,
            MaxCount=count,
            InstanceType=INSTANCE_TYPE,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        )
        sets.append([i["InstanceId"] for i in launched["Instances"]])
        if (n + 1) % 200 == 0:
            print(f"  launched {n + 1}/{pools} sets", file=sys.stderr)
    return sets


def _cpu_ms(read: Callable[[int], object], calls: int) -> float:
    start = time.process_time()
    for n in range(calls):
        read(n)
    return (time.process_time() - start) / calls * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--count", type=int, default=2, help="instances per pool")
    parser.add_argument("--calls", type=int, default=40, help="calls per read and mode")
    parser.add_argument(
        "--record", action="store_true", help="keep this run's figures as the bench's baseline"
    )
    args = parser.parse_args(argv)
    ran_on = baselines.commit()  # what the figures measure, whatever is committed meanwhile
    figures: dict[str, float] = {}
    # moto's 2,600 stock AMIs are not read here; the seeded EKS AMIs are.
    os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    with mock_aws():
        emulator = install()
        emulator.reset()
        emulator.set_default_free(args.pools * args.count + 100)
        emulator.set_throttling(enabled=False)
        ec2 = boto3.client("ec2", region_name=REGION)
        sets = _launch(ec2, args.pools, args.count)
        ec2.terminate_instances(InstanceIds=sets[0])  # the sweep lists every state
        k = len(sets)

        reads: list[tuple[str, Callable[[int], object]]] = [
            ("one pool's live instances", lambda n: find_managed(ec2, CLUSTER, f"pool-{n % k}")),
            (
                f"every instance, every state ({args.pools * args.count}, all pages)",
                lambda n: find_managed(ec2, CLUSTER, states=ALL_STATES),
            ),
            ("a set by instance-id filter", lambda n: describe_instances(ec2, sets[n % k])),
            ("a set by ids", lambda n: ec2.describe_instances(InstanceIds=sets[n % k])),
            (
                "DescribeInstanceAttribute",
                lambda n: ec2.describe_instance_attribute(
                    InstanceId=sets[n % k][0], Attribute="instanceType"
                ),
            ),
        ]
        rows = []
        for name, read in reads:
            # The region's whole listing takes seconds moto's way: a tenth as many calls.
            calls = max(1, args.calls // 10) if name.startswith("every") else args.calls
            with motos_own_reads():
                theirs = _cpu_ms(read, calls)
            ours = _cpu_ms(read, calls)
            rows.append([name, f"{theirs:.1f}", f"{ours:.1f}", ratio(ours, theirs), str(calls)])
            figures[f"{name}: moto's CPU ms"] = theirs
            figures[f"{name}: emulator's CPU ms"] = ours
        emulator.reset_switches()  # capacity and throttling as an emulator starts
    print(
        f"the emulator's instance reads: {args.pools} reservations of {args.count} instances, "
        "CPU ms per call (this process: client and server)"
    )
    print(table(["read", "moto's", "emulator's", "ratio", "calls"], rows))
    baselines.compare_and_record(
        "bench_emulator_reads", figures, record_run=args.record, ran_on=ran_on
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
