"""Cost of each stack operation, on the S3 backend beside the file backend, with the CLI
starting a provider host per operation beside the shared provider host: wall time, CPU and
Pulumi CLI processes, so later work can cut them.

    .venv/bin/python -m bench.bench_stack_ops [--rounds 3] [--count 3] [--backends file,s3]
        [--provider-hosts perOperation,shared] [--requests-by-key] [--record]

Runs the real stack driver against the local emulator with the project's Pulumi CLI behind a
counting shim (a `bin/pulumi` script that logs its arguments, then execs the real CLI), for
several pools in turn, once per backend and `stackOperations.providerHost` mode (the
first mode is the baseline the second is compared with): `file://` in a temp dir, and the production
default, an S3 bucket with `awskms://` secrets (both served by the emulator, over HTTP on
127.0.0.1: the figures show the backend's request pattern, not a network's latency).
Operations: prepare (create), prepare (no change), the warm-path outputs read, the first
outputs read of a fresh replica (another driver, its own empty disk), record, remove, record
again, destroy, and a recover() of clean stacks. Prints each backend's table (median and
worst wall time, CLI processes by subcommand), then each backend's two modes side by side
with the ratio. Each table also has the CPU seconds of the finished child processes (the CLI
and the provider hosts it starts) plus, in the shared mode, what the shared host used
meanwhile (read from /proc: it is a child that lives on), per operation, and a line for
one pool's whole life
(prepare, record, remove, record, destroy): CLI processes and child CPU-s. With
`--requests-by-key` the emulator keeps its access log and each S3 table is followed by each
operation's state-bucket and KMS requests by kind and key (`bench.backend_requests`). Before the
stack operations it prints what the program and the provider host import (`-X importtime`
total, process CPU, project modules, whether pydantic and boto3 came along). Figures, not
assertions: nothing here fails on a slow machine.

Each run ends with its figures beside the ones recorded in `bench/baselines/bench_stack_ops.json`
(`bench.baselines`; `--record` keeps the run's): per backend and mode and per operation the
median wall time, child CPU, CLI processes and S3 and KMS requests, and one pool's life.
A figure the run did not measure (another backend, mode or `--rounds`) is listed as not
measured now; compare runs of the same arguments. The cold path's prepare went from 0.95 s
to 2.98 s once with nothing to say so: this is the bench that would have.

Before issue #14 (commit 8d24de9) and after (93c03cc), run back to back on the same 2 cores
(load 3-4), `--rounds 3`; median wall s / child CPU s / CLI processes per call:

    operation            file 8d24de9     file 93c03cc     S3 8d24de9       S3 93c03cc
    prepare (create)     7.68 / 4.55 / 6  2.52 / 2.05 / 2  4.75 / 3.42 / 7  2.61 / 2.08 / 2*
    prepare (no change)  5.42 / 3.18 / 4  1.40 / 1.21 / 1  2.39 / 1.98 / 4  1.25 / 1.09 / 1
    record               5.17 / 3.58 / 4  1.99 / 1.72 / 1  3.02 / 2.42 / 4  1.92 / 1.63 / 1
    remove (release set) 6.26 / 3.59 / 4  2.00 / 1.80 / 1  3.67 / 2.25 / 4  2.01 / 1.57 / 1
    destroy              4.46 / 2.74 / 3  2.43 / 1.92 / 2  3.68 / 2.23 / 3  2.94 / 2.05 / 2
    pool lifecycle       21 procs, 18.05 CPU-s   7, 9.20   22, 12.73        7, 8.95
    imports (CPU s, provisioner.* modules): program 0.87, 32 -> 0.47, 14; provider host
    0.77, 32 -> 0.44, 14 (pydantic no longer loaded; boto3 still is)

    * plus one `stack ls` for the first pool of a driver that has not run recover().

The old code cannot be selected from here; to run it, take its tree and put it first on the
path of the bench and of the provider hosts the CLI starts:

    git archive 8d24de9 provisioner stacks bench devenv | tar -x -C /tmp/old
    cd /tmp/old && PYTHONPATH=/tmp/old <checkout>/.venv/bin/python -m bench.bench_stack_ops
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import statistics
import subprocess
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

from bench import baselines
from bench.backend_requests import BackendRequests
from bench.procfs import cpu_seconds, machine_cpu, stat_fields, status_kib
from devenv.emulator import EmulatorProcess
from devenv.state_backend import DEFAULT_BUCKET, seed_state_backend
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
        self._emulator = emulator.client
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

    def requests_by_service(self) -> Counter[str]:
        """Every AWS request the emulator has answered, by service (`s3`, `kms`, `ec2`)."""
        counts: Counter[str] = Counter()
        for call, cost in self._emulator.request_costs().items():
            counts[call.split(":", 1)[0]] += int(cost["requests"])
        return counts

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
    def __init__(self, cli: CountingCli, aws_calls: Callable[[], Counter[str]]) -> None:
        self.cli = cli
        # Requests the emulator has answered so far, by AWS service: a call's S3 and KMS
        # requests are what the state backend and the secrets provider cost it.
        self.aws_calls = aws_calls
        self.requests: dict[str, list[Counter[str]]] = {}
        # The shared provider host's pid (None per operation, or before it starts): a
        # long-lived child, so its CPU is read from /proc, not from the reaped children.
        self.host_pid: Callable[[], int | None] = lambda: None
        self.walls: dict[str, list[float]] = {}
        self.procs: dict[str, list[int]] = {}
        self.kinds: dict[str, Counter[str]] = {}
        self.cpu: dict[str, list[float]] = {}
        # With --requests-by-key: the state-bucket and KMS requests of each call, by key.
        self.by_key: BackendRequests | None = None
        self.keyed: dict[str, list[Counter[tuple[str, str]]]] = {}

    def measure(self, name: str, fn: Callable[[], Any]) -> Any:
        before = len(self.cli.lines())
        host_before = self.host_pid()
        host_cpu_before = _process_cpu(host_before)
        children_before = _children_cpu()
        calls_before = self.aws_calls()
        if self.by_key is not None:
            self.by_key.take()
        started = time.perf_counter()
        value = fn()
        self.walls.setdefault(name, []).append(time.perf_counter() - started)
        self.requests.setdefault(name, []).append(self.aws_calls() - calls_before)
        if self.by_key is not None:
            self.keyed.setdefault(name, []).append(self.by_key.take())
        host_after = self.host_pid()
        # A host started during the call: all of its CPU so far belongs to this call.
        host_cpu = _process_cpu(host_after) - (
            host_cpu_before if host_after == host_before else 0.0
        )
        self.cpu.setdefault(name, []).append(_children_cpu() - children_before + host_cpu)
        new = self.cli.lines()[before:]
        self.procs.setdefault(name, []).append(len(new))
        self.kinds.setdefault(name, Counter()).update(_subcommand(line) for line in new)
        return value

    def report(self, rounds: int) -> str:
        rows = [
            (
                "operation",
                "wall s (median)",
                "wall s (max)",
                "child CPU s",
                "CLI procs",
                "S3 / KMS requests",
                "CLI commands per call",
            )
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
                    f"{statistics.median(self.cpu[name]):.2f}",
                    f"{statistics.median(procs):g}",
                    self._requests(name),
                    kinds or "-",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join([f"rounds: {rounds}", *lines, self.lifecycle()])

    def figures(self, mode: str) -> dict[str, float]:
        """The figures a run is compared on, each named by ``mode`` (backend/providerHost)
        and operation: median wall s, child CPU s, CLI processes, S3 and KMS requests per
        call; and one pool's life in CLI processes and child CPU-s."""
        figures: dict[str, float] = {}
        for name, walls in self.walls.items():
            calls = self.requests.get(name) or [Counter()]
            figures[f"{mode} {name}: wall s"] = statistics.median(walls)
            figures[f"{mode} {name}: child CPU s"] = statistics.median(self.cpu[name])
            figures[f"{mode} {name}: CLI processes"] = statistics.median(self.procs[name])
            for service in ("s3", "kms"):
                figures[f"{mode} {name}: {service.upper()} requests"] = statistics.median(
                    c[service] for c in calls
                )
        if all(n in self.walls for n in LIFECYCLE):
            procs, cpu = self._cost(LIFECYCLE, _CALLS_PER_ROUND)
            figures[f"{mode} pool lifecycle: CLI processes"] = procs
            figures[f"{mode} pool lifecycle: child CPU s"] = cpu
        return figures

    def requests_by_key(self) -> str:
        """Each operation's state-bucket and KMS requests by kind and key, median per call."""
        lines = []
        for name, calls in self.keyed.items():
            kinds = sorted(set().union(*calls))
            if not kinds:
                continue
            medians = {k: statistics.median(c[k] for c in calls) for k in kinds}
            total = statistics.median(sum(c.values()) for c in calls)
            lines.append(f"{name}: {total:g} requests")
            lines += [f"    {n:>4g}  {kind:<14} {what}" for (kind, what), n in medians.items() if n]
        return "\n".join(lines)

    def _requests(self, name: str) -> str:
        """Median S3 and KMS requests of one call."""
        calls = self.requests.get(name) or [Counter()]
        s3, kms = (statistics.median(c[service] for c in calls) for service in ("s3", "kms"))
        return f"{s3:g} / {kms:g}"

    def lifecycle(self) -> str:
        """One pool's whole life (create, two generations recorded, remove, destroy), and
        each further claim on a pool whose stack is kept between claims (one record, one
        remove): the Pulumi CLI processes they start and the CPU they and their plugin
        hosts burn."""
        lines = []
        for what, names, rounds in (
            ("pool lifecycle", LIFECYCLE, _CALLS_PER_ROUND),
            ("claim on a kept stack", CLAIM, {}),
        ):
            procs, cpu = self._cost(names, rounds)
            lines.append(
                f"per {what} ({' + '.join(_times(n, rounds) for n in names)}): "
                f"{procs:g} CLI processes, {cpu:.2f} child CPU-s"
            )
        return "\n".join(lines)

    def _cost(self, names: tuple[str, ...], calls: dict[str, int]) -> tuple[float, float]:
        """CLI processes and child CPU-s of the operations `names`, each as often as `calls`
        says it runs (once by default)."""
        return (
            sum(_per_round(self.procs, n, calls) for n in names),
            sum(_per_round(self.cpu, n, calls) for n in names),
        )


# The operations of one pool's life, each counted as often as a round runs it.
LIFECYCLE = ("prepare (create)", "record", "remove (release set)", "destroy")
# What each claim after the first costs while the pool keeps its stack (idleStackTTL).
CLAIM = ("record", "remove (release set)")


# A round records two generations' sets (a pool that acquired twice in its life).
_CALLS_PER_ROUND = {"record": 2}


def _times(name: str, calls: dict[str, int]) -> str:
    return f"{name} x{calls[name]}" if calls.get(name, 1) != 1 else name


def _per_round(values: dict[str, list[Any]], name: str, calls: dict[str, int]) -> float:
    """The median of one call, times how often `calls` says it runs (once by default)."""
    return float(statistics.median(values[name])) * calls.get(name, 1) if name in values else 0.0


def _process_cpu(pid: int | None) -> float:
    """User + system CPU of a running process (0 for None or a process gone)."""
    if pid is None:
        return 0.0
    try:
        return cpu_seconds(stat_fields(pid))
    except OSError:
        return 0.0


def _children_cpu() -> float:
    """User + system CPU of every finished child: the CLI processes and, through them,
    the language and provider hosts they start and wait for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _real_cli(arg: str | None) -> Path:
    if arg:
        return Path(arg) / "bin" / "pulumi"
    from provisioner.toolchain.installer import resolve
    from provisioner.toolchain.versions import PULUMI

    return Path(resolve(PULUMI).binary)


# What each engine run imports on top of the Pulumi SDK: the program (in the controller, once)
# and the dynamic providers (in a fresh provider host per `up` and `destroy`).
IMPORTS = {
    "program": "import stacks.pool_program",
    "provider host": "import pulumi.dynamic, stacks.launch_template, stacks.instance_profile, "
    "stacks.access_entry, stacks.placement_group, stacks.instance_set",
}
_IMPORT_REPORT = (
    "import sys, resource; {statement}; u = resource.getrusage(resource.RUSAGE_SELF); "
    "mods = sys.modules; "
    "print(u.ru_utime + u.ru_stime, sum(m.startswith('provisioner.') for m in mods), "
    "'pydantic' in mods, 'boto3' in mods)"
)


def import_costs(samples: int = 3) -> str:
    """Each import statement in a fresh interpreter: `-X importtime`'s total for the
    top-level modules, the process's CPU, how many project modules came along, and whether
    pydantic and boto3 did."""
    rows = [
        ("imports", "importtime s", "process CPU s", "provisioner.* modules", "pydantic, boto3")
    ]
    for name, statement in IMPORTS.items():
        totals, cpus, last = [], [], ["?", "?", "?", "?"]
        for _ in range(samples):
            done = subprocess.run(
                [
                    sys.executable,
                    "-X",
                    "importtime",
                    "-c",
                    _IMPORT_REPORT.format(statement=statement),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            # Top-level lines (no indent before the module name) sum to the statement's total.
            totals.append(
                sum(
                    int(line.split("|")[1])
                    for line in done.stderr.splitlines()
                    if line.startswith("import time:")
                    and not line.split("|")[2].startswith("  ")
                    and line.split("|")[1].strip().isdigit()
                )
                / 1e6
            )
            last = done.stdout.split()
            cpus.append(float(last[0]))
        rows.append(
            (
                name,
                f"{statistics.median(totals):.2f}",
                f"{statistics.median(cpus):.2f}",
                last[1],
                f"{last[2]}, {last[3]}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=3, help="instances per gang")
    parser.add_argument("--pulumi-root", help="CLI root (bin/pulumi); default: the project's")
    parser.add_argument("--backends", default="file,s3", help="comma-separated: file, s3")
    parser.add_argument(
        "--requests-by-key",
        action="store_true",
        help="log the emulator's requests and list each operation's S3 and KMS ones by key",
    )
    parser.add_argument(
        "--provider-hosts",
        default="perOperation,shared",
        help="comma-separated stackOperations.providerHost modes, the first the baseline",
    )
    parser.add_argument(
        "--record", action="store_true", help="keep this run's figures as the bench's baseline"
    )
    args = parser.parse_args(argv)
    ran_on = baselines.commit()  # what the figures measure, whatever is committed meanwhile
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("PULUMI_CONFIG_PASSPHRASE", "bench")
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        os.environ.pop(key, None)

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    hosts = [h.strip() for h in args.provider_hosts.split(",") if h.strip()]
    print(import_costs(), flush=True)
    machine_before = machine_cpu()
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-stack-") as tmp:
        work = Path(tmp)
        cli = CountingCli(_real_cli(args.pulumi_root), work)
        with EmulatorProcess(work / "emulator", access_log=args.requests_by_key) as emulator:
            aws = Aws(emulator.endpoint_url, emulator)
            recorders: dict[str, Recorder] = {}
            for backend, host in [(b, h) for b in backends for h in hosts]:
                name = f"{backend}/{host}"
                state_dir = work / backend / host / "state"
                pulumi = {"state_dir": str(state_dir), "backend_url": f"file://{state_dir}"}
                if backend == "s3":
                    state = seed_state_backend(aws.endpoint, REGION)
                    pulumi.update(
                        backend_url=state.backend_url, secrets_provider=state.secrets_provider
                    )
                settings = Settings.model_validate(
                    {
                        "cluster_name": CLUSTER,
                        "defaults": {"region": REGION, "node_role_arn": aws.role_arn},
                        "pulumi": pulumi,
                        "aws": {"endpoint_url": aws.endpoint},
                        "stack_operations": {"provider_host": host},
                    }
                )
                print(
                    f"\n== {name}: {settings.pulumi.backend_url}, providerHost {host}",
                    flush=True,
                )
                by_key = (
                    BackendRequests(emulator.log_path, DEFAULT_BUCKET)
                    if args.requests_by_key and backend == "s3"
                    else None
                )
                recorders[name] = _rounds(
                    settings,
                    cli,
                    aws,
                    work / backend / host,
                    f"{backend}-{host.lower()}",
                    args,
                    by_key,
                )
                print(recorders[name].report(args.rounds), flush=True)
                figures |= recorders[name].figures(name)
                if by_key is not None:
                    print(recorders[name].requests_by_key(), flush=True)
            # Each backend's modes side by side, the first mode the baseline.
            for backend in backends:
                pair = [(n, r) for n, r in recorders.items() if n.startswith(f"{backend}/")]
                if len(pair) == 2:
                    print("\n" + side_by_side(*pair))
    stolen = machine_cpu().since(machine_before).stolen_percent
    print(f"\nthe hypervisor took {stolen:.0f} % of the cores during the run (steal)")
    # Once the emulator and the provider hosts are gone: the calibration times this machine.
    baselines.compare_and_record(
        "bench_stack_ops", figures, record_run=args.record, ran_on=ran_on, steal_percent=stolen
    )
    return 0


def _rounds(
    settings: Settings,
    cli: CountingCli,
    aws: Aws,
    work: Path,
    label: str,
    args: argparse.Namespace,
    by_key: BackendRequests | None = None,
) -> Recorder:
    rec = Recorder(cli, aws.requests_by_service)
    rec.by_key = by_key
    log = logging.getLogger("bench")
    driver = rec.measure("driver start", lambda: StackDriver(settings, cli.root, log))
    rec.host_pid = lambda: driver.provider_host_pid
    threads_before = threading.active_count()
    for n in range(args.rounds):
        pool = f"bench-{label}-{n}"
        spec = aws.spec(pool)
        made = rec.measure("prepare (create)", partial(driver.prepare, spec))
        rec.measure("prepare (no change)", partial(driver.prepare, spec))
        rec.measure("outputs (warm path)", partial(driver.outputs, pool))
        fresh_dir = work / f"replica-{n}"
        fresh = StackDriver(
            settings.model_copy(
                update={"pulumi": settings.pulumi.model_copy(update={"state_dir": fresh_dir})}
            ),
            cli.root,
            log,
        )
        rec.measure("outputs (fresh replica)", partial(fresh.outputs, pool))
        template = made.outputs.launch_template_id
        ids = aws.launch(pool, template, args.count, 0)
        rec.measure("record", partial(driver.record_instance_set, pool, "gen-0", ids))
        rec.measure("remove (release set)", partial(driver.remove_instance_set, pool))
        ids = aws.launch(pool, template, args.count, 1)
        rec.measure("record", partial(driver.record_instance_set, pool, "gen-1", ids))
        rec.measure("destroy", partial(driver.destroy, pool))
    rec.measure("recover (clean)", driver.recover)
    print(
        f"threads in this process: {threads_before} before the rounds, "
        f"{threading.active_count()} after"
    )
    if driver.provider_host_pid is not None:
        rss = status_kib(driver.provider_host_pid, "VmRSS") / 1024
        print(f"shared provider host: pid {driver.provider_host_pid}, RSS {rss:.0f} MiB")
    driver.close()
    return rec


def side_by_side(first: tuple[str, Recorder], second: tuple[str, Recorder]) -> str:
    """Each operation's median wall time, CPU and CLI processes in both runs, and the ratio."""
    (a, ra), (b, rb) = first, second
    title = f"{a} against {b}"
    a, b = a.rsplit("/", 1)[-1], b.rsplit("/", 1)[-1]
    rows = [
        (
            "operation",
            f"{a} s",
            f"{b} s",
            f"{b}/{a}",
            f"CPU s {a}",
            f"CPU s {b}",
            f"CLI procs {a}/{b}",
        )
    ]
    for name in ra.walls:
        if name not in rb.walls:
            continue
        wa, wb = statistics.median(ra.walls[name]), statistics.median(rb.walls[name])
        ratio = f"{wb / wa:.2f}x" if wa > 0.005 else "-"
        ca, cb = statistics.median(ra.cpu[name]), statistics.median(rb.cpu[name])
        procs = f"{statistics.median(ra.procs[name]):g}/{statistics.median(rb.procs[name]):g}"
        rows.append((name, f"{wa:.2f}", f"{wb:.2f}", ratio, f"{ca:.2f}", f"{cb:.2f}", procs))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([title, *lines])


if __name__ == "__main__":
    sys.exit(main())
