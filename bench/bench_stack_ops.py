"""Cost of each stack operation: wall time and Pulumi CLI processes, so later work can cut them.

    .venv/bin/python -m bench.bench_stack_ops [--rounds 3] [--count 3]

Runs the real stack driver against the local EC2 emulator with the project's Pulumi CLI
behind a counting shim (a `bin/pulumi` script that logs its arguments, then execs the real
CLI), for several pools in turn: prepare (create), prepare (no change), the warm-path
outputs read, record, remove, record again, destroy, and a recover() of clean stacks.
Prints, per operation, the median and worst wall time and the CLI processes it started,
by subcommand. Figures, not assertions: nothing here fails on a slow machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]

from devenv.emulator import EmulatorProcess
from provisioner.api.settings import Settings
from provisioner.cloud import Ec2Engine, LaunchSpec, LaunchTemplateRef, SubnetRef, SystemClock
from provisioner.cloud.ec2api import build_clients
from provisioner.cloud.naming import instance_profile_name
from provisioner.cloud.nodeadm import render_user_data
from provisioner.pulumi_driver import StackDriver
from provisioner.pulumi_driver.cli_env import LAUNCHER
from stacks.spec import PoolSpec, pool_tags

CLUSTER = "bench"
REGION = "us-east-1"


class CountingCli:
    """A CLI root whose `bin/pulumi` records each invocation before running the real one."""

    def __init__(self, real_binary: Path, where: Path) -> None:
        self.log = where / "invocations.log"
        self.root = where / "cli"
        (self.root / "bin").mkdir(parents=True)
        shim = self.root / "bin" / "pulumi"
        shim.write_text(
            f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{self.log}"\nexec "{real_binary}" "$@"\n'
        )
        shim.chmod(0o755)
        # The real CLI finds the launcher beside its own binary; this copy tells the driver so.
        launcher = real_binary.parent / LAUNCHER
        (self.root / "bin" / LAUNCHER).symlink_to(launcher)
        self.log.touch()

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()


def _subcommand(args: str) -> str:
    words = [w for w in args.split() if not w.startswith("-")]
    if words[:1] == ["stack"] and len(words) > 1:
        return f"stack {words[1]}"
    return words[0] if words else "?"


class Aws:
    def __init__(self, endpoint: str, emulator: EmulatorProcess) -> None:
        self.endpoint = endpoint
        emulator.client.register_eks_cluster(CLUSTER)
        session = boto3.session.Session(region_name=REGION)
        self.clients = build_clients(session, REGION, endpoint)
        iam = session.client("iam", endpoint_url=endpoint)
        self.role_arn = iam.create_role(RoleName="node", AssumeRolePolicyDocument="{}")["Role"][
            "Arn"
        ]
        self.profile = instance_profile_name(CLUSTER, "node")
        iam.create_instance_profile(InstanceProfileName=self.profile)
        iam.add_role_to_instance_profile(InstanceProfileName=self.profile, RoleName="node")
        session.client("eks", endpoint_url=endpoint).create_access_entry(
            clusterName=CLUSTER, principalArn=self.role_arn, type="EC2_LINUX"
        )
        ec2 = session.client("ec2", endpoint_url=endpoint)
        images = ec2.describe_images(Owners=["602401143452"])["Images"]
        self.ami = next(i["ImageId"] for i in images if i.get("Architecture") == "x86_64")
        self.subnets = tuple(
            SubnetRef(s["SubnetId"], s["AvailabilityZone"])
            for s in ec2.describe_subnets()["Subnets"]
        )

    def spec(self, pool: str) -> PoolSpec:
        return PoolSpec(
            cluster=CLUSTER,
            pool=pool,
            region=REGION,
            endpoint_url=self.endpoint,
            node_role_arn=self.role_arn,
            instance_profile_name=self.profile,
            image_id=self.ami,
            instance_type="m5.large",
            user_data=render_user_data(
                cluster_name=CLUSTER,
                api_server_endpoint="https://bench.eks.local",
                certificate_authority="Y2E=",
                service_cidr="172.20.0.0/16",
                pool=pool,
                group="gen-0",
            ),
            tags=pool_tags(CLUSTER, pool, timedelta(hours=4)),
            release_wait_seconds=60,
            poll_seconds=0.5,
        )

    def launch(self, pool: str, template: str, count: int, generation: int) -> list[str]:
        engine = Ec2Engine(self.clients, SystemClock())
        spec = LaunchSpec(
            pool_name=pool,
            pool_uid=f"uid-{pool}",
            acquire_generation=generation,
            cluster_name=CLUSTER,
            count=count,
            instance_type="m5.large",
            mode="runinstances",
            subnets=self.subnets,
            launch_template=LaunchTemplateRef(template),
        )
        return list(engine.acquire(spec).instance_ids)


class Recorder:
    def __init__(self, cli: CountingCli) -> None:
        self.cli = cli
        self.walls: dict[str, list[float]] = {}
        self.procs: dict[str, list[int]] = {}
        self.kinds: dict[str, Counter[str]] = {}

    def measure(self, name: str, fn: Callable[[], Any]) -> Any:
        before = len(self.cli.lines())
        started = time.perf_counter()
        value = fn()
        self.walls.setdefault(name, []).append(time.perf_counter() - started)
        new = self.cli.lines()[before:]
        self.procs.setdefault(name, []).append(len(new))
        self.kinds.setdefault(name, Counter()).update(_subcommand(line) for line in new)
        return value

    def report(self, rounds: int) -> str:
        rows = [
            ("operation", "wall s (median)", "wall s (max)", "CLI procs", "CLI commands per call")
        ]
        for name, walls in self.walls.items():
            procs = self.procs[name]
            kinds = ", ".join(
                f"{k} x{v / len(procs):g}" for k, v in sorted(self.kinds[name].items())
            )
            rows.append(
                (
                    name,
                    f"{statistics.median(walls):.2f}",
                    f"{max(walls):.2f}",
                    f"{statistics.median(procs):g}",
                    kinds or "-",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join([f"rounds: {rounds}", *lines])


def _real_cli(arg: str | None) -> Path:
    if arg:
        return Path(arg) / "bin" / "pulumi"
    from provisioner.toolchain.installer import resolve
    from provisioner.toolchain.versions import PULUMI

    return Path(resolve(PULUMI).binary)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=3, help="instances per gang")
    parser.add_argument("--pulumi-root", help="CLI root (bin/pulumi); default: the project's")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("PULUMI_CONFIG_PASSPHRASE", "bench")
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        os.environ.pop(key, None)

    with tempfile.TemporaryDirectory(prefix="bench-stack-") as tmp:
        work = Path(tmp)
        cli = CountingCli(_real_cli(args.pulumi_root), work)
        with EmulatorProcess(work / "emulator") as emulator:
            aws = Aws(emulator.endpoint_url, emulator)
            settings = Settings.model_validate(
                {
                    "cluster_name": CLUSTER,
                    "defaults": {"region": REGION, "node_role_arn": aws.role_arn},
                    "pulumi": {"state_dir": str(work / "state")},
                    "aws": {"endpoint_url": aws.endpoint},
                }
            )
            rec = Recorder(cli)
            log = logging.getLogger("bench")
            driver = rec.measure("driver start", lambda: StackDriver(settings, cli.root, log))
            threads_before = threading.active_count()
            for n in range(args.rounds):
                pool = f"bench-{n}"
                spec = aws.spec(pool)
                made = rec.measure("prepare (create)", partial(driver.prepare, spec))
                rec.measure("prepare (no change)", partial(driver.prepare, spec))
                rec.measure("outputs (warm path)", partial(driver.outputs, pool))
                template = made.outputs.launch_template_id
                ids = aws.launch(pool, template, args.count, 0)
                rec.measure("record", partial(driver.record_instance_set, pool, "gen-0", ids))
                rec.measure("remove (release set)", partial(driver.remove_instance_set, pool))
                ids = aws.launch(pool, template, args.count, 1)
                rec.measure("record", partial(driver.record_instance_set, pool, "gen-1", ids))
                rec.measure("destroy", partial(driver.destroy, pool))
            rec.measure("recover (clean)", driver.recover)
            print(rec.report(args.rounds))
            print(
                f"\nthreads in this process: {threads_before} before the rounds, "
                f"{threading.active_count()} after"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
