"""Admission overhead: what our check adds to a gang Job's admission, cold and warm.

    .venv/bin/python -m bench.bench_admission [--cold 15] [--warm 30] [--baseline 30]
        [--floor 30] [--early 30] [--cold-queued 5] [--cold-instant 10] [--cold-slow 3]
        [--slow-join 60] [--record]

A quick check that it runs: ``--cold 1 --warm 1 --baseline 1 --floor 1 --early 1
--cold-queued 1 --cold-instant 1 --cold-slow 1 --slow-join 5``. ``--record`` keeps the
run's figures as ``bench/baselines/bench_admission.json``; every run prints its figures
beside them.

Starts the embedded default (etcd + kube-apiserver, the real Kueue manager, the EC2
emulator, the node simulator and our controller with the real Pulumi driver, its stacks in
an S3 bucket with KMS secrets as production keeps them, both served by the emulator) and
submits gang Jobs of --count nodes one at a time, series side by side:

- baseline: a Job on a ClusterQueue without our check: what Kueue's admission costs alone;
- floor: a Job on a ClusterQueue whose one check a trivial controller in the bench sets
  Ready the instant Kueue reserves quota (`instant_check`): what any admission check costs
  under Kueue's protocol (two Kueue writes instead of one, the check's between them), the
  floor under our warm figure;
- early: the same instant check, answering before quota is reserved: as soon as Kueue lists
  it on a Workload, or, not listed yet, by adding its own entry (`instant_check`'s
  `before_quota` and `own_queue`). What a check whose answer is known before quota costs:
  the floor of a warm set claimed while its gang waits for quota, which the product does
  not do. Its steps say whether Kueue admitted with the reservation (quota reserved ->
  Admitted 0) or in a write after it. Kueue 0.19.2's scheduler decides that from the copy
  of the Workload it popped from its queue at the start of the cycle (`Scheduler.schedule`
  takes the heads, `admit` -> `prepareWorkload` sets Admitted beside the reservation only
  if that copy has every check Ready); a Ready written after the pop reaches the Workload
  controller only, which admits in a write of its own. So only a check Ready before the
  scheduler takes the Workload saves Kueue's second write;
- cold: each Job names a pool never used before: the pool is created, its stack prepared
  (Pulumi up), the set launched N-or-0, recorded in the stack (Pulumi up) while the nodes
  join, our check goes Ready and Kueue admits;
- warm: a Job on a pool an earlier Job left warm: claim, check Ready, admit, no launch;
- cold-queued: cold, on a queue Kueue holds (its ClusterQueue's `stopPolicy: Hold`) until
  the pool's stack has been prepared ahead of quota; then released. Its figures are from
  Kueue's quota reservation to Admitted: what a gang waits for once quota is there, the
  stack already prepared. The cold series' "after quota" figure is the same measure;
- cold-instant: cold again, with a simulated boot of 0 s: the Nodes are made Ready as soon
  as the simulator sees the instances running, so raw has next to nothing to subtract and
  the cold figure leans on no estimate of what the boot hid (the record `up` runs beside
  the join and delays nothing it does not take the cores from);
- cold-slow: cold again, with a realistic --slow-join (60 s) simulated boot, to show the
  controller's share of a cold start a user actually waits through.

Each Job has two figures, both printed. **raw** is from the Job's creation to Kueue's
Admitted condition, as a watch on the Workloads sees it. **ours** subtracts only the part
of the simulated boot (first seen running to the last Node Ready) that did not overlap the
controller's own work: a stack operation (the record `up` runs beside the join) that ran
while the nodes booted is counted as ours, even though Ready does not wait for it, so the
figure can only err high. The stack operations' times are the driver's own markers
(``<stateDir>/operations/<pool>.json``), read right after admission. The controller's share
of a cold start is ours / raw. Prints p50/p95/max per series, the ratio to the baseline,
and where the cold and warm time goes.

Beside the times, what each series asked of the API server per admission (`api_requests`):
its writes by resource, every client's and ours (the controller and webhook run in this
process, so their requests are counted as they are made), and our reads. Each Job is
counted over its whole life, created to finished (a gang's pool warm again). Figures, not
assertions: nothing here fails on a slow machine.
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from bench import baselines
from bench.api_requests import (
    ProductRequests,
    SeriesCounter,
    SeriesRequests,
    controller_passes,
)
from bench.api_requests import report as requests_report
from bench.instant_check import InstantCheck
from bench.procfs import machine_cpu
from bench.stats import percentile, ratio, table
from bench.watching import (
    Timeline,
    admitted_with_reservation,
    instances_tagged,
    ready_before_quota,
    wait_for,
)
from devenv import kueue_objects as ko
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.pulumi_driver.cli_env import StatePaths
from provisioner.pulumi_driver.oplog import OperationLog

NAMESPACE = "default"
PLAIN_QUEUE = "plain-queue"
PLAIN_CLUSTER_QUEUE = "plain-cluster-queue"
# A queue with our check whose ClusterQueue Kueue holds (`stopPolicy: Hold`) until the bench
# lets it admit: a gang waiting for quota, as a busy cluster's gangs do.
HELD_QUEUE = "held-queue"
HELD_CLUSTER_QUEUE = "held-cluster-queue"
# A queue whose one check the bench's instant controller answers (`instant_check`).
FLOOR_QUEUE = "floor-queue"
FLOOR_CLUSTER_QUEUE = "floor-cluster-queue"
FLOOR_CHECK = "bench-instant-check"
# A queue whose one check the instant controller answers before quota (`before_quota`).
EARLY_QUEUE = "early-queue"
EARLY_CLUSTER_QUEUE = "early-cluster-queue"
EARLY_CHECK = "bench-early-check"
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
    # The driver's markers are wall-clock times; the watches here are monotonic.
    wall_minus_monotonic: float = field(default_factory=lambda: time.time() - time.monotonic())

    def wait(self, what: str, probe: Callable[[], Any], timeout: float = 180) -> Any:
        return wait_for(what, probe, timeout, every=0.02)

    def _admitted(self, job: str) -> float:
        return float(
            self.wait(f"{job} admitted", lambda: self.timeline.workload(job).get("Admitted"))
        )

    def plain(self, series: str, name: str, queue: str) -> None:
        """A Job that is no gang (no pool label, no gang annotations) on `queue`: the
        baseline's, without a check, or the floor's and the early one's, behind the
        instant check."""
        body = ko.gang_job(NAMESPACE, name, queue, "unused", self.count)
        del body["metadata"]["labels"][c.POOL_LABEL]
        body["metadata"]["annotations"] = {}
        submitted = time.monotonic()
        self.batch.create_namespaced_job(NAMESPACE, body)
        admitted = self._admitted(name)
        raw = admitted - submitted
        sample = {"admission": raw, "raw": raw}
        marks = self.timeline.workload(name)
        if series == "floor":
            quota = marks.get("QuotaReserved", admitted)
            ready = marks.get("checkReady", admitted)
            sample |= {
                "quota": quota - submitted,
                "quotaToCheckReady": ready - quota,
                "checkReadyToAdmitted": admitted - ready,
            }
        elif series == "early":
            quota = marks.get("QuotaReserved", admitted)
            ready = marks.get("checkReady", quota)
            sample |= {
                "checkReady": ready - submitted,
                "checkReadyToQuota": quota - ready,
                "quotaToAdmitted": admitted - quota,
                "readyBeforeQuota": float(ready_before_quota(marks)),
                "admittedWithQuota": float(admitted_with_reservation(marks)),
            }
        self.samples.setdefault(series, []).append(sample)
        self._run_to_the_end(name)

    def _run_to_the_end(self, name: str) -> None:
        """Run a plain Job as the Job simulator runs a gang's (it runs only Jobs of a pool):
        started once Kueue unsuspends it, complete `run_seconds` later, then wait for Kueue
        to finish its Workload. Every series' requests per admission so count a Job's whole
        life, with the same two Job status writes."""
        assert self.env.jobs is not None
        job = self.wait(
            f"{name} unsuspended",
            lambda: (
                (j := self.batch.read_namespaced_job(name, NAMESPACE)).spec.suspend is False and j
            ),
        )
        started = {"startTime": _now(), "active": self.count}
        self.batch.patch_namespaced_job_status(name, NAMESPACE, {"status": started})
        time.sleep(self.env.jobs.run_seconds)
        now, completions = _now(), job.spec.completions or self.count
        done = {
            "active": 0,
            "ready": 0,
            "succeeded": completions,
            "completedIndexes": "0" if completions == 1 else f"0-{completions - 1}",
            "conditions": [
                _condition("SuccessCriteriaMet", now),
                _condition("Complete", now),
            ],
            "completionTime": now,
        }
        self.batch.patch_namespaced_job_status(name, NAMESPACE, {"status": done})
        self.wait(f"{name} finished", lambda: self.timeline.workload(name).get("Finished"))

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
        boot = self._join_window(pool) if launched else (0.0, 0.0)
        ours = self._stack_work(pool, admitted)
        join = boot[1] - boot[0]
        overlapped = _overlap(boot, ours) if launched else 0.0
        # Only the boot our own work did not overlap is subtracted.
        waited_on_boot = join - overlapped
        sample = {
            "admission": admitted - submitted - waited_on_boot,
            "raw": admitted - submitted,
            "join": join,
            "bootOverlapped": overlapped,
            "launched": float(launched),
            "quota": marks.get("QuotaReserved", admitted) - submitted,
            "checkReady": marks.get("checkReady", admitted) - submitted - waited_on_boot,
        }
        if series == "warm":
            workload = self.timeline.workload_name(name)
            claimed = phases.get(f"claimed:{workload}", admitted)
            satisfied = phases.get(f"{Phase.SATISFIED}:{workload}", admitted)
            check_ready = marks.get("checkReady", admitted)
            sample |= {
                "quotaToClaimed": claimed - submitted - sample["quota"],
                "claimedToSatisfied": satisfied - claimed,
                "satisfiedToCheckReady": check_ready - satisfied,
                "checkReadyToAdmitted": admitted - check_ready,
            }
        else:
            acquiring = phases.get(Phase.ACQUIRING, submitted)
            joining = phases.get(Phase.JOINING, acquiring)
            satisfied = phases.get(Phase.SATISFIED, joining)
            prepared = phases.get("stack:prepare:succeeded", acquiring)
            prepared = min(max(prepared, acquiring), joining)
            sample |= {
                "toAcquiring": acquiring - submitted,
                "acquiring": joining - acquiring,
                "acquiringToPrepared": prepared - acquiring,
                "preparedToJoining": joining - prepared,
                "joiningLessBoot": satisfied - joining - waited_on_boot,
                "satisfiedToAdmitted": admitted - satisfied,
            }
        self.samples.setdefault(series, []).append(sample)
        # The Job simulator finishes the Job; Kueue finishes its Workload; the pool goes warm.
        self.wait(f"{name} finished", lambda: self.timeline.workload(name).get("Finished"))
        self.wait(f"{pool} KeepWarm", lambda: self._phase(pool) == Phase.KEEP_WARM)

    def queued_gang(self, name: str, pool: str) -> None:
        """A cold gang that waits for quota: its pool's stack is prepared meanwhile, and
        the figure is from Kueue's reservation to Admitted (less the boot our work did not
        overlap): what a user waits for once quota is there."""
        self.batch.create_namespaced_job(
            NAMESPACE, ko.gang_job(NAMESPACE, name, HELD_QUEUE, pool, self.count)
        )
        try:
            self.wait(
                f"{pool}'s stack prepared ahead of quota",
                lambda: self.timeline.pool(pool).get("stack:prepare:succeeded"),
                timeout=120,
            )
        except SystemExit:
            print(self._state_of(pool, name), file=sys.stderr)
            raise
        _hold(self.custom, False)
        try:
            admitted = self._admitted(name)
        finally:
            _hold(self.custom, True)
        quota = float(self.timeline.workload(name).get("QuotaReserved", admitted))
        boot = self._join_window(pool)
        overlapped = _overlap(boot, self._stack_work(pool, admitted))
        waited_on_boot = boot[1] - boot[0] - overlapped
        self.samples.setdefault("cold-queued", []).append(
            {
                "admission": admitted - quota - waited_on_boot,
                "raw": admitted - quota,
                "join": boot[1] - boot[0],
                "bootOverlapped": overlapped,
                "launched": float(self._launched(pool)),
                "quota": 0.0,
            }
        )
        self.wait(f"{name} finished", lambda: self.timeline.workload(name).get("Finished"))
        self.wait(f"{pool} KeepWarm", lambda: self._phase(pool) == Phase.KEEP_WARM)

    def _state_of(self, pool: str, job: str) -> str:
        """What the pool says and what the timeline saw of it and of the Job's Workload, for
        a wait that gave up."""
        try:
            found = self.custom.get_cluster_custom_object(*GNP, pool)
            said: dict[str, Any] = {"spec": found.get("spec"), "status": found.get("status")}
        except k8s.ApiException as err:
            said = {"unreadable": err.status}
        seen = {"pool": self.timeline.pool(pool), "workload": self.timeline.workload(job)}
        return json.dumps({"pool": said, "seen": seen}, indent=1, default=str)

    def _phase(self, pool: str) -> str | None:
        obj = self.custom.get_cluster_custom_object(*GNP, pool)
        return (obj.get("status") or {}).get("phase")

    def _instances(self, pool: str) -> list[dict[str, Any]]:
        return instances_tagged(self.env.ec2_client(), c.TAG_POOL, pool)

    def _launched(self, pool: str) -> int:
        return len(self._instances(pool))

    def _stack_work(self, pool: str, admitted: float) -> tuple[float, float]:
        """When the pool's last stack operation ran (the record, for a cold Job read right
        after admission), up to `admitted` if it still runs; empty if there was none."""
        assert self.env.settings is not None
        op = OperationLog(StatePaths(self.env.settings.pulumi.state_dir).operations).last(pool)
        if op is None:
            return (0.0, 0.0)
        start = op.started_at.timestamp() - self.wall_minus_monotonic
        end = (
            op.finished_at.timestamp() - self.wall_minus_monotonic
            if op.finished_at is not None
            else admitted
        )
        return (start, min(end, admitted))

    def _join_window(self, pool: str) -> tuple[float, float]:
        assert self.env.nodes is not None
        joins = self.env.nodes.joins()
        records = [
            joins[i["InstanceId"]] for i in self._instances(pool) if i["InstanceId"] in joins
        ]
        if len(records) < self.count:
            raise SystemExit(f"pool {pool}: {len(records)} of {self.count} joins recorded")
        return (min(r.first_running for r in records), max(r.ready for r in records))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, now: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True",
        "reason": "CompletionsReached",
        "message": "Reached expected number of succeeded pods",
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(min(a[1], b[1]) - max(a[0], b[0]), 0.0)


def _hold(custom: k8s.CustomObjectsApi, held: bool) -> None:
    custom.patch_cluster_custom_object(
        *KUEUE,
        "clusterqueues",
        HELD_CLUSTER_QUEUE,
        {"spec": {"stopPolicy": "Hold" if held else "None"}},
    )


def _apply_queue(
    custom: k8s.CustomObjectsApi, local: str, cluster: str, check: str | None, *, held: bool
) -> None:
    """A ClusterQueue (with `check`, or none; `held`: `stopPolicy: Hold`) and a LocalQueue
    on it in the bench's namespace."""
    queue = ko.cluster_queue(cluster, ko.FLAVOR_NAME, check, ko.LOCAL_QUOTAS)
    if held:
        queue["spec"]["stopPolicy"] = "Hold"
    custom.create_cluster_custom_object(*KUEUE, "clusterqueues", queue)
    custom.create_namespaced_custom_object(
        *KUEUE, NAMESPACE, "localqueues", ko.local_queue(NAMESPACE, local, cluster)
    )


def _report(
    samples: dict[str, list[dict[str, float]]], join_delay: float, slow_join: float, count: int
) -> str:
    """The times: each series against the baseline, and where the cold, warm and floor
    time goes."""
    base = percentile([s["admission"] for s in samples.get("baseline", [])], 50)
    base95 = percentile([s["admission"] for s in samples.get("baseline", [])], 95)
    rows = []
    for series in _SERIES_ORDER:
        values = [s["admission"] for s in samples.get(series, [])]
        if not values:
            continue
        launched = sum(s.get("launched", 0) for s in samples[series])
        rows.append(
            [
                series,
                str(len(values)),
                f"{percentile([s['raw'] for s in samples[series]], 50):.3f}",
                f"{percentile(values, 50):.3f}",
                f"{percentile(values, 95):.3f}",
                f"{max(values):.3f}",
                ratio(percentile(values, 50), base),
                ratio(percentile(values, 95), base95),
                f"{launched:g}",
            ]
        )
    out = [
        f"admission overhead, gang of {count}, seconds from Job creation to Kueue Admitted: "
        f"raw, and ours = raw minus the simulated boot ({join_delay:g}s; {slow_join:g}s in "
        "cold-slow, 0s in cold-instant) that did not overlap our own stack work (percentiles and "
        "ratios are of ours)",
        table(
            (
                "series",
                "n",
                "raw p50 s",
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
            ("  of it: Acquiring -> stack prepared (queue, stack init, up)", "acquiringToPrepared"),
            ("  of it: stack prepared -> Joining (N-or-0 launch)", "preparedToJoining"),
            (
                "Joining -> Satisfied (join; the record runs beside), less unoverlapped boot",
                "joiningLessBoot",
            ),
            ("Satisfied -> Admitted (check Ready, Kueue admits)", "satisfiedToAdmitted"),
            ("simulated boot (first running -> last Ready)", "join"),
            ("of it overlapped by our stack work, not subtracted", "bootOverlapped"),
        ]
        out += ["", _breakdown("cold", parts, cold)]
    warm = samples.get("warm", [])
    if warm:
        parts = [
            ("Job created -> quota reserved (Kueue)", "quota"),
            ("quota reserved -> pool claimed (Workload reconciler)", "quotaToClaimed"),
            ("claimed -> pool Satisfied (pool reconciler, warm set checked)", "claimedToSatisfied"),
            ("Satisfied -> check Ready (Workload reconciler)", "satisfiedToCheckReady"),
            ("check Ready -> Admitted (Kueue)", "checkReadyToAdmitted"),
        ]
        out += ["", _breakdown("warm", parts, warm)]
    floor = samples.get("floor", [])
    if floor:
        parts = [
            ("Job created -> quota reserved (Kueue)", "quota"),
            ("quota reserved -> check Ready (the instant check)", "quotaToCheckReady"),
            ("check Ready -> Admitted (Kueue)", "checkReadyToAdmitted"),
        ]
        out += ["", _breakdown("floor", parts, floor)]
    early = samples.get("early", [])
    if early:
        parts = [
            ("Job created -> check Ready (the instant check, before quota)", "checkReady"),
            ("check Ready -> quota reserved (Kueue)", "checkReadyToQuota"),
            ("quota reserved -> Admitted (Kueue; 0: with the reservation)", "quotaToAdmitted"),
        ]
        out += ["", _breakdown("early", parts, early)]
        before = round(sum(e["readyBeforeQuota"] for e in early))
        together = round(sum(e["admittedWithQuota"] for e in early))
        out.append(
            f"early: check Ready before quota in {before} of {len(early)}; admitted with "
            f"the reservation (one write) in {together} of {len(early)}"
        )
    slow = samples.get("cold-slow", [])
    if slow:
        ours = percentile([s["admission"] for s in slow], 50)
        raw = percentile([s["raw"] for s in slow], 50)
        shares = [s["admission"] / s["raw"] for s in slow if s["raw"] > 0]
        out += [
            "",
            f"controller's share of a cold start with a {slow_join:g}s simulated boot: "
            f"p50 ours {ours:.3f}s of p50 raw {raw:.3f}s = {ours / raw:.1%} "
            f"(per Job: p50 {percentile(shares, 50):.1%}, max {max(shares):.1%})",
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", type=int, default=15, help="Jobs on new pools")
    parser.add_argument("--warm", type=int, default=30, help="Jobs on warm pools")
    parser.add_argument("--baseline", type=int, default=30, help="Jobs on the plain queue")
    parser.add_argument(
        "--floor", type=int, default=30, help="Jobs behind the bench's instant check"
    )
    parser.add_argument(
        "--early", type=int, default=30, help="Jobs behind the instant check before quota"
    )
    parser.add_argument("--count", type=int, default=2, help="nodes per gang")
    parser.add_argument("--join-delay", type=float, default=1.0, help="simulated boot, s")
    parser.add_argument(
        "--cold-instant", type=int, default=10, help="cold Jobs with a 0 s simulated boot"
    )
    parser.add_argument(
        "--cold-slow", type=int, default=3, help="cold Jobs with the --slow-join boot"
    )
    parser.add_argument(
        "--slow-join", type=float, default=60.0, help="simulated boot of cold-slow, s"
    )
    parser.add_argument(
        "--cold-queued",
        type=int,
        default=5,
        help="cold Jobs that wait for quota (their stacks prepared meanwhile)",
    )
    parser.add_argument("--json", type=Path, help="also write the samples here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--record", action="store_true", help="keep this run's figures as the bench's baseline"
    )
    args = parser.parse_args(argv)
    ran_on = baselines.commit()  # what the figures measure, whatever is committed meanwhile
    if (
        args.cold < 1
        or args.warm < 0
        or args.baseline < 1
        or min(args.cold_slow, args.cold_instant, args.floor, args.early) < 0
    ):
        parser.error(
            "--cold and --baseline must be at least 1, --warm, --floor, --early, "
            "--cold-instant and --cold-slow at least 0"
        )

    work = Path(tempfile.mkdtemp(prefix="bench-admission-"))
    (work / "logs").mkdir()
    # Timestamped, so a kept work dir's log can lay one admission's steps out in time.
    logging.basicConfig(
        filename=work / "logs" / "controller.log",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    os.environ.setdefault("PULUMI_CONFIG_PASSPHRASE", "bench")
    env = LocalEnvironment(
        work_dir=work,
        join_delay=args.join_delay,
        keep_warm_ttl="30m",
        job_run_seconds=0.3,
        # Hundreds of Jobs: their status only, no Pod writes, no training controllers.
        simulate_pods=False,
        training_controllers=False,
        # The slow series' boot must not trip the join deadline.
        join_deadline_seconds=max(60, int(args.slow_join * 2) + 60),
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
        _apply_queue(custom, PLAIN_QUEUE, PLAIN_CLUSTER_QUEUE, None, held=False)
        _apply_queue(custom, HELD_QUEUE, HELD_CLUSTER_QUEUE, ko.CHECK_NAME, held=True)
        instant = InstantCheck(api, NAMESPACE, FLOOR_CHECK)
        instant.start()
        _apply_queue(custom, FLOOR_QUEUE, FLOOR_CLUSTER_QUEUE, FLOOR_CHECK, held=False)
        early = InstantCheck(api, NAMESPACE, EARLY_CHECK, before_quota=True, own_queue=EARLY_QUEUE)
        early.start()
        _apply_queue(custom, EARLY_QUEUE, EARLY_CLUSTER_QUEUE, EARLY_CHECK, held=False)
        timeline = Timeline(api, NAMESPACE, checks=(ko.CHECK_NAME, FLOOR_CHECK, EARLY_CHECK))
        timeline.start()
        bench = Bench(env, timeline, args.count, k8s.BatchV1Api(api), custom)
        print(f"up in {time.monotonic() - started:.1f}s; work dir {work}", file=sys.stderr)
        assert env.manager is not None
        registry = env.manager.metrics.registry
        counter = SeriesCounter(api, ProductRequests.new(), lambda: controller_passes(registry))
        machine_before = machine_cpu()
        with counter.product.counting():
            _run_series(bench, counter, args)
        stolen = machine_cpu().since(machine_before).stolen_percent
        instant.stop()
        early.stop()
        timeline.stop()
        if args.early:
            print(
                f"early check: {early.ready_written} Ready writes, {early.entries_added} of "
                f"them adding its own entry before Kueue listed it; refused: {early.refused}",
                file=sys.stderr,
            )
        print(_report(bench.samples, args.join_delay, args.slow_join, args.count))
        print("\n" + requests_report(counter.series))
        print(
            f"\nmachine: {os.cpu_count()} cores; whole run {time.monotonic() - started:.0f}s; "
            f"the hypervisor took {stolen:.0f} % of the cores during the series (steal: "
            "a run with much stolen ran on less machine, and its times are upper bounds)"
        )
        figures = key_figures(bench.samples, counter.series)
        if args.json:
            args.json.write_text(json.dumps(bench.samples, indent=1))
    except BaseException:
        # A run that stops keeps its work dir: its logs and the stack operations' markers
        # are what says why.
        args.keep = True
        print(f"work dir kept: {work}", file=sys.stderr)
        raise
    finally:
        env.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    # Once the environment is down: the calibration beside the baseline times this machine,
    # not this machine with the cluster the series ran on still using it.
    baselines.compare_and_record(
        "bench_admission", figures, record_run=args.record, ran_on=ran_on, steal_percent=stolen
    )
    return 0


def _run_series(bench: Bench, counter: SeriesCounter, args: argparse.Namespace) -> None:
    """Each series in turn, its requests counted from its first Job to its last one's end."""
    env = bench.env
    assert env.nodes is not None
    run = uuid.uuid4().hex[:4]

    def series(name: str, n: int, one: Callable[[int], None]) -> None:
        if n < 1:
            return
        with counter.counting(name, n):
            for i in range(n):
                one(i)
                print(f"{name} {i + 1}/{n}", file=sys.stderr, flush=True)

    series("baseline", args.baseline, lambda i: bench.plain("baseline", f"plain-{i}", PLAIN_QUEUE))
    series("floor", args.floor, lambda i: bench.plain("floor", f"floor-{i}", FLOOR_QUEUE))
    series("early", args.early, lambda i: bench.plain("early", f"early-{i}", EARLY_QUEUE))
    pools = [f"bench-{run}-{i}" for i in range(args.cold)]
    series("cold", args.cold, lambda i: bench.gang("cold", f"cold-{i}", pools[i]))
    series("warm", args.warm, lambda i: bench.gang("warm", f"warm-{i}", pools[i % len(pools)]))
    series(
        "cold-queued",
        args.cold_queued,
        lambda i: bench.queued_gang(f"cold-queued-{i}", f"bench-{run}-queued-{i}"),
    )
    env.nodes.join_delay = 0.0
    series(
        "cold-instant",
        args.cold_instant,
        lambda i: bench.gang("cold-instant", f"cold-instant-{i}", f"bench-{run}-instant-{i}"),
    )
    env.nodes.join_delay = args.slow_join
    series(
        "cold-slow",
        args.cold_slow,
        lambda i: bench.gang("cold-slow", f"cold-slow-{i}", f"bench-{run}-slow-{i}"),
    )


_SERIES_ORDER = (
    "baseline",
    "floor",
    "early",
    "warm",
    "cold",
    "cold-queued",
    "cold-instant",
    "cold-slow",
)
# The cold steps a regression hides in (issue: prepare 0.95 s -> 2.98 s went unflagged).
_COLD_STEPS = ("acquiringToPrepared", "preparedToJoining", "joiningLessBoot", "satisfiedToAdmitted")
_WARM_STEPS = ("quotaToClaimed", "claimedToSatisfied", "satisfiedToCheckReady")
# What a warm admission writes, ours, by resource (the rest of the series' writes are
# Kueue's and the simulators').
_WARM_WRITES = ("gangnodepools", "gangnodepools/status", "workloads/status", "events")


def key_figures(
    samples: dict[str, list[dict[str, float]]],
    requests: dict[str, SeriesRequests] | None = None,
) -> dict[str, float]:
    """The figures a run is compared on: each series' p50 (ours), warm, cold and the two
    floors against Kueue alone and warm against each floor, the cold and warm steps' p50s, the
    controller's share of a slow cold start, and per series the API server's writes per
    admission (every client's and ours) and our reads, with our warm writes by resource.
    A series the run left out gives no figure."""
    figures: dict[str, float] = {}
    p50 = {
        series: percentile([s["admission"] for s in rows], 50)
        for series, rows in samples.items()
        if rows
    }
    for series, value in p50.items():
        figures[f"{series}: p50 s"] = value
    base = p50.get("baseline")
    for series in ("warm", "cold", "floor", "early"):
        if base and series in p50:
            figures[f"{series} p50 / baseline p50"] = p50[series] / base
    for floor in ("floor", "early"):
        if p50.get(floor) and "warm" in p50:
            figures[f"warm p50 / {floor} p50"] = p50["warm"] / p50[floor]
    # From Kueue's reservation on: what a gang waits for once its quota is there (a queued
    # gang's stack was prepared while it waited; a cold one's is prepared after).
    for series in ("cold", "cold-queued", "cold-instant"):
        after = [s["admission"] - s.get("quota", 0.0) for s in samples.get(series, [])]
        if after:
            figures[f"{series}: p50 after quota s"] = percentile(after, 50)
    # With a 0 s boot there is next to nothing to subtract: raw is the estimate-free figure.
    instant = [s["raw"] for s in samples.get("cold-instant", [])]
    if instant:
        figures["cold-instant: raw p50 s"] = percentile(instant, 50)
    for series, steps in (("cold", _COLD_STEPS), ("warm", _WARM_STEPS)):
        for step in steps:
            values = [s[step] for s in samples.get(series, []) if step in s]
            if values:
                figures[f"{series} {step}: p50 s"] = percentile(values, 50)
    slow = [s["admission"] / s["raw"] for s in samples.get("cold-slow", []) if s["raw"] > 0]
    if slow:
        figures["cold-slow: controller's share"] = percentile(slow, 50)
    for series, counted in (requests or {}).items():
        figures[f"{series}: writes per admission"] = sum(counted.writes().values())
        figures[f"{series}: our writes per admission"] = sum(counted.writes(ours=True).values())
        figures[f"{series}: our reads per admission"] = sum(counted.reads(ours=True).values())
        passes = counted.passes_per_admission()
        for reconciler in ("workload", "gangnodepool"):
            if reconciler in passes:
                figures[f"{series}: {reconciler} passes per admission"] = passes[reconciler]
    warm = (requests or {}).get("warm")
    if warm is not None:
        ours = warm.writes(ours=True)
        for resource in _WARM_WRITES:
            figures[f"warm: our {resource} writes per admission"] = ours.get(resource, 0.0)
    return figures


def _breakdown(series: str, parts: list[tuple[str, str]], samples: list[dict[str, float]]) -> str:
    """The p50 and p95 of each step of a series, one row per (label, sample key)."""
    rows = [
        [
            label,
            f"{percentile([s[k] for s in samples], 50):.3f}",
            f"{percentile([s[k] for s in samples], 95):.3f}",
        ]
        for label, k in parts
    ]
    return f"where the {series} time goes (p50 / p95 s)\n" + table(("step", "p50 s", "p95 s"), rows)


if __name__ == "__main__":
    raise SystemExit(main())
