"""Admission overhead: what our check adds to a gang Job's admission, cold and warm.

    .venv/bin/python -m bench.bench_admission [--cold 15] [--warm 30] [--baseline 30]

Starts the embedded default (etcd + kube-apiserver, the real Kueue manager, the EC2
emulator, the node simulator and our controller with the real Pulumi driver on a file
backend) and submits gang Jobs of --count nodes one at a time, three series side by side:

- baseline: a Job on a ClusterQueue without our check: what Kueue's admission costs alone;
- cold: each Job names a pool never used before: the pool is created, its stack prepared
  (Pulumi up), the set launched N-or-0, recorded in the stack (Pulumi up) while the nodes
  join, our check goes Ready and Kueue admits;
- warm: a Job on a pool an earlier Job left warm: claim, check Ready, admit, no launch.

Each figure is from the Job's creation to Kueue's Admitted condition, as a watch on the
Workloads sees it, minus the boot the node simulator made the gang wait (first seen running
to the last Node Ready), which a real node would spend booting whatever controller ran.
Prints p50/p95/max per series, the ratio to the baseline, and where the cold time goes.
Figures, not assertions: nothing here fails on a slow machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from bench.stats import percentile, ratio, table
from bench.watching import Timeline, instances_tagged, wait_for
from devenv import kueue_objects as ko
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c

NAMESPACE = "default"
PLAIN_QUEUE = "plain-queue"
PLAIN_CLUSTER_QUEUE = "plain-cluster-queue"
KUEUE = (c.KUEUE_GROUP, c.KUEUE_VERSION)
GNP = (c.GROUP, c.VERSION, c.GNP_PLURAL)


@dataclass
class Bench:
    env: LocalEnvironment
    timeline: Timeline
    count: int
    batch: k8s.BatchV1Api
    custom: k8s.CustomObjectsApi
    samples: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    def wait(self, what: str, probe: Callable[[], Any], timeout: float = 180) -> Any:
        return wait_for(what, probe, timeout, every=0.02)

    def _admitted(self, job: str) -> float:
        return float(
            self.wait(f"{job} admitted", lambda: self.timeline.workload(job).get("Admitted"))
        )

    def baseline(self, index: int) -> None:
        name = f"plain-{index}"
        body = ko.gang_job(NAMESPACE, name, PLAIN_QUEUE, "unused", self.count)
        # Not a gang Job: no pool label, no gang annotations, a queue without our check.
        del body["metadata"]["labels"][c.POOL_LABEL]
        body["metadata"]["annotations"] = {}
        submitted = time.monotonic()
        self.batch.create_namespaced_job(NAMESPACE, body)
        admitted = self._admitted(name)
        self.samples.setdefault("baseline", []).append({"admission": admitted - submitted})
        self.batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")

    def gang(self, series: str, name: str, pool: str) -> None:
        launched_before = self._launched(pool)
        submitted = time.monotonic()
        self.batch.create_namespaced_job(
            NAMESPACE, ko.gang_job(NAMESPACE, name, ko.QUEUE_NAME, pool, self.count)
        )
        admitted = self._admitted(name)
        marks = self.timeline.workload(name)
        phases = self.timeline.pool(pool)
        launched = self._launched(pool) - launched_before
        join = self._join_window(pool) if launched else 0.0
        sample = {
            "admission": admitted - submitted - join,
            "join": join,
            "launched": float(launched),
            "quota": marks.get("QuotaReserved", admitted) - submitted,
            "checkReady": marks.get("checkReady", admitted) - submitted - join,
        }
        if series == "cold":
            acquiring = phases.get(c.PHASE_ACQUIRING, submitted)
            joining = phases.get(c.PHASE_JOINING, acquiring)
            satisfied = phases.get(c.PHASE_SATISFIED, joining)
            sample |= {
                "toAcquiring": acquiring - submitted,
                "acquiring": joining - acquiring,
                "joiningLessBoot": satisfied - joining - join,
                "satisfiedToAdmitted": admitted - satisfied,
            }
        self.samples.setdefault(series, []).append(sample)
        # The Job simulator finishes the Job; Kueue finishes its Workload; the pool goes warm.
        self.wait(f"{name} finished", lambda: self.timeline.workload(name).get("Finished"))
        self.wait(f"{pool} KeepWarm", lambda: self._phase(pool) == c.PHASE_KEEP_WARM)

    def _phase(self, pool: str) -> str | None:
        obj = self.custom.get_cluster_custom_object(*GNP, pool)
        return (obj.get("status") or {}).get("phase")

    def _instances(self, pool: str) -> list[dict[str, Any]]:
        return instances_tagged(self.env.ec2_client(), c.TAG_POOL, pool)

    def _launched(self, pool: str) -> int:
        return len(self._instances(pool))

    def _join_window(self, pool: str) -> float:
        assert self.env.nodes is not None
        joins = self.env.nodes.joins()
        records = [
            joins[i["InstanceId"]] for i in self._instances(pool) if i["InstanceId"] in joins
        ]
        if len(records) < self.count:
            raise SystemExit(f"pool {pool}: {len(records)} of {self.count} joins recorded")
        return max(r.ready for r in records) - min(r.first_running for r in records)


def _apply_plain_queue(custom: k8s.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object(
        *KUEUE,
        "clusterqueues",
        ko.cluster_queue(PLAIN_CLUSTER_QUEUE, ko.FLAVOR_NAME, None, ko.LOCAL_QUOTAS),
    )
    custom.create_namespaced_custom_object(
        *KUEUE,
        NAMESPACE,
        "localqueues",
        ko.local_queue(NAMESPACE, PLAIN_QUEUE, PLAIN_CLUSTER_QUEUE),
    )


def _report(samples: dict[str, list[dict[str, float]]], join_delay: float, count: int) -> str:
    base = percentile([s["admission"] for s in samples.get("baseline", [])], 50)
    base95 = percentile([s["admission"] for s in samples.get("baseline", [])], 95)
    rows = []
    for series in ("baseline", "warm", "cold"):
        values = [s["admission"] for s in samples.get(series, [])]
        if not values:
            continue
        launched = sum(s.get("launched", 0) for s in samples[series])
        rows.append(
            [
                series,
                str(len(values)),
                f"{percentile(values, 50):.3f}",
                f"{percentile(values, 95):.3f}",
                f"{max(values):.3f}",
                ratio(percentile(values, 50), base),
                ratio(percentile(values, 95), base95),
                f"{launched:g}",
            ]
        )
    out = [
        f"admission overhead, gang of {count}, seconds from Job creation to Kueue Admitted "
        f"(simulated boot of {join_delay:g}s + detection subtracted)",
        table(
            (
                "series",
                "n",
                "p50 s",
                "p95 s",
                "max s",
                "p50 vs baseline",
                "p95 vs baseline",
                "instances launched",
            ),
            rows,
        ),
    ]
    cold = samples.get("cold", [])
    if cold:
        parts = [
            ("Job created -> quota reserved (Kueue)", "quota"),
            ("Job created -> pool Acquiring", "toAcquiring"),
            ("Acquiring -> Joining (Pulumi prepare, N-or-0 launch)", "acquiring"),
            ("Joining -> Satisfied (Pulumi record, labels), boot subtracted", "joiningLessBoot"),
            ("Satisfied -> Admitted (check Ready, Kueue admits)", "satisfiedToAdmitted"),
            ("simulated boot subtracted", "join"),
        ]
        out += [
            "",
            "where the cold time goes (p50 / p95 s)",
            table(
                ("step", "p50 s", "p95 s"),
                [
                    [
                        label,
                        f"{percentile([s[k] for s in cold], 50):.3f}",
                        f"{percentile([s[k] for s in cold], 95):.3f}",
                    ]
                    for label, k in parts
                ],
            ),
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", type=int, default=15, help="Jobs on new pools")
    parser.add_argument("--warm", type=int, default=30, help="Jobs on warm pools")
    parser.add_argument("--baseline", type=int, default=30, help="Jobs on the plain queue")
    parser.add_argument("--count", type=int, default=2, help="nodes per gang")
    parser.add_argument("--join-delay", type=float, default=1.0, help="simulated boot, s")
    parser.add_argument("--json", type=Path, help="also write the samples here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if args.cold < 1 or args.warm < 0 or args.baseline < 1:
        parser.error("--cold and --baseline must be at least 1, --warm at least 0")

    work = Path(tempfile.mkdtemp(prefix="bench-admission-"))
    (work / "logs").mkdir()
    logging.basicConfig(filename=work / "logs" / "controller.log", level=logging.INFO)
    os.environ.setdefault("PULUMI_CONFIG_PASSPHRASE", "bench")
    env = LocalEnvironment(
        work_dir=work, join_delay=args.join_delay, keep_warm_ttl="30m", job_run_seconds=0.3
    )
    started = time.monotonic()
    print("starting the embedded default ...", file=sys.stderr, flush=True)
    try:
        env.start()
        assert env.control_plane is not None and env.nodes is not None and env.jobs is not None
        env.nodes.poll_interval = 0.05  # detection latency is the simulator's, not ours
        env.jobs.poll_interval = 0.1
        api = env.control_plane.api_client()
        custom = k8s.CustomObjectsApi(api)
        _apply_plain_queue(custom)
        timeline = Timeline(api, NAMESPACE)
        timeline.start()
        bench = Bench(env, timeline, args.count, k8s.BatchV1Api(api), custom)
        print(f"up in {time.monotonic() - started:.1f}s; work dir {work}", file=sys.stderr)
        run = uuid.uuid4().hex[:4]
        for i in range(args.baseline):
            bench.baseline(i)
        print(f"baseline: {args.baseline} Jobs", file=sys.stderr, flush=True)
        pools = [f"bench-{run}-{i}" for i in range(args.cold)]
        for i, pool in enumerate(pools):
            bench.gang("cold", f"cold-{i}", pool)
            print(f"cold {i + 1}/{args.cold}", file=sys.stderr, flush=True)
        for i in range(args.warm):
            bench.gang("warm", f"warm-{i}", pools[i % len(pools)])
            print(f"warm {i + 1}/{args.warm}", file=sys.stderr, flush=True)
        timeline.stop()
        print(_report(bench.samples, args.join_delay, args.count))
        print(f"\nmachine: {os.cpu_count()} cores; whole run {time.monotonic() - started:.0f}s")
        if args.json:
            args.json.write_text(json.dumps(bench.samples, indent=1))
        return 0
    finally:
        env.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
