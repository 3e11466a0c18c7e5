"""Scale: many pools and Workloads churned through one controller process.

    .venv/bin/python -m bench.bench_scale [--pools 200] [--workloads 1000] [--baseline-pools 20]
        [--stack-workers N]

Two runs side by side, each on a fresh embedded default (etcd + kube-apiserver, the real
Kueue manager, the EC2 emulator, the node simulator) with our controller as its own process
(`atomic-gang controller`, real Pulumi driver on the emulator's S3 bucket with KMS secrets,
as production keeps its stacks): a baseline of --baseline-pools pools, then --pools pools,
with --workloads/--pools Workloads per pool in both. Each wave submits one gang Job per
pool at once and waits until every one has been admitted, run (the Job simulator) and
finished and every pool is warm again; the first wave acquires every pool cold (Pulumi
prepare, N-or-0 launch, join; each set's record in its stack runs after every prepare, and
the next wave waits for the records, printed apart), the later ones reuse the warm sets.
One more wave submits the same Jobs on a queue without our check over the same warm Nodes:
what Kueue and the Job simulator take alone. And one more on a queue whose one check the
bench's instant controller sets Ready the moment Kueue reserves quota (`instant_check`):
what any AdmissionCheck costs under Kueue, the floor under a warm wave. And one more whose
check the same controller sets Ready before quota is reserved (`before_quota`, adding its
own entry when Kueue has not listed the check yet): what a check whose answer is known
before quota costs. Each wave is also timed to its last Job finished: the waves without our
check end there (they hold no pool), ours go on until every claim is released and every pool
warm again. At the end every pool is deleted and its stack destroyed.

Prints, per run and as a ratio: the controller's peak RSS (and with its Pulumi children),
its CPU seconds (and its children's), reconcile lag p50/p99 per reconciler (the work
queues' histograms on /metrics: from a key becoming ready to a worker taking it), the time
from quota reserved to our check Ready (cold and warm), and the wall time of each phase.
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
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from bench import baselines
from bench.api_requests import apiserver_requests
from bench.instant_check import InstantCheck
from bench.procfs import (
    PAGE,
    TICKS,
    MachineCpu,
    command_line,
    cpu_seconds,
    descendants,
    machine_cpu,
    processes,
    stat_fields,
    status_kib,
)
from bench.stats import histogram_quantile, percentile, ratio, table
from bench.watching import (
    GNP,
    KUEUE,
    Timeline,
    admitted_with_reservation,
    instances_tagged,
    ready_before_quota,
    wait_for,
)
from devenv import kueue_objects as ko
from devenv.controller_process import start_controller, write_settings
from devenv.environment import LocalEnvironment
from devenv.processes import Supervised, free_port
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.settings import Settings
from provisioner.toolchain import installer as toolchain

NAMESPACE = "default"
PLAIN_QUEUE = "plain-queue"
PLAIN_CLUSTER_QUEUE = "plain-cluster-queue"
# A queue behind the bench's instant check (`instant_check`): Kueue's AdmissionCheck floor.
FLOOR_QUEUE = "floor-queue"
FLOOR_CLUSTER_QUEUE = "floor-cluster-queue"
FLOOR_CHECK = "bench-instant-check"
# A queue whose check the instant controller answers before quota (`before_quota`).
EARLY_QUEUE = "early-queue"
EARLY_CLUSTER_QUEUE = "early-cluster-queue"
EARLY_CHECK = "bench-early-check"
RECONCILERS = ("workload", "gangnodepool", "admissioncheck")


# --- the controller process and what /proc says of it ---------------------------------------


def _group(pgid: int) -> list[tuple[int, list[str]]]:
    """Every live process of the group, with its stat fields."""
    return [(pid, fields) for pid, fields in processes().items() if int(fields[2]) == pgid]


def _group_rss_kib(pgid: int) -> int:
    return sum(int(fields[21]) * PAGE // 1024 for _, fields in _group(pgid))


def _live_children_cpu(pgid: int) -> float:
    """CPU of the group's processes still running besides its leader: the shared provider
    host lives as long as the controller, so it is never among the reaped children."""
    return sum(cpu_seconds(fields) for pid, fields in _group(pgid) if pid != pgid)


# Who burns the machine's CPU besides the controller: each process the bench started, by
# what its command line says it is. The controller's Pulumi children are counted apart.
_PROCESS_KINDS = (
    ("devenv.emulator", "EC2 emulator"),
    ("kube-apiserver", "kube-apiserver"),
    ("etcd", "etcd"),
    ("kueue", "Kueue manager"),
)


def _cpu_by_kind() -> dict[str, float]:
    """CPU seconds so far of the bench process (node and Job simulators, the watches) and of
    each environment process it started, by kind; the controller and its tree are left out."""
    fields = stat_fields(os.getpid())
    spent = {"bench process (node + Job simulators)": cpu_seconds(fields)}
    for pid, fields in descendants(os.getpid()).items():
        line = command_line(pid)
        kind = next((label for marker, label in _PROCESS_KINDS if marker in line), None)
        if kind is not None:
            spent[kind] = spent.get(kind, 0.0) + cpu_seconds(fields)
    return spent


def _controller_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds so far of the controller itself and of its Pulumi children (those reaped
    and those still running, the shared provider host among them)."""
    fields = stat_fields(pid)
    reaped = (int(fields[13]) + int(fields[14])) / TICKS
    return cpu_seconds(fields), reaped + _live_children_cpu(pid)


def _cpu_with_controller(pid: int) -> dict[str, float]:
    """`_cpu_by_kind()` and the controller's own CPU and its Pulumi children's, so far."""
    own, children = _controller_cpu(pid)
    return _cpu_by_kind() | {"controller": own, "controller's Pulumi children": children}


def _spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Each counter's growth from `before` to `after`."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def _requests(api: k8s.ApiClient, env: LocalEnvironment) -> dict[str, float]:
    """`api_requests.apiserver_requests` and the emulator's count of AWS calls, by call."""
    counts = apiserver_requests(api)
    for call, cost in env.emulator_client.request_costs().items():
        counts[f"AWS {call}"] = float(cost["requests"])
    return counts


# The figure names of a wave's `MachineCpu`, in its order: `{series}WaveMachine{key}`.
_MACHINE_KEYS = ("Busy", "Total", "Stolen")


@dataclass(frozen=True)
class _WaveCounters:
    """The counters a wave's cost is read from, at its start or its end.

    Reading the API server's metrics takes a while and costs CPU: before a wave it is read
    before the CPU counters, after it after them, so the wave counts neither read."""

    requests: dict[str, float]
    cpu: dict[str, float]
    machine: MachineCpu

    @classmethod
    def before_wave(
        cls, api: k8s.ApiClient, env: LocalEnvironment, controller: int
    ) -> _WaveCounters:
        requests = _requests(api, env)
        return cls(requests, _cpu_with_controller(controller), machine_cpu())

    @classmethod
    def after_wave(
        cls, api: k8s.ApiClient, env: LocalEnvironment, controller: int
    ) -> _WaveCounters:
        cpu, machine = _cpu_with_controller(controller), machine_cpu()
        return cls(_requests(api, env), cpu, machine)


@dataclass
class Sampler:
    """Samples the controller's RSS and its process group's (Pulumi CLI and providers)."""

    pid: int
    every: float = 0.5
    peak_group_kib: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.peak_group_kib = max(self.peak_group_kib, _group_rss_kib(self.pid))

    def finish(self) -> dict[str, float]:
        """Peak RSS and CPU so far; call while the controller still runs."""
        self._stop.set()
        own, children = _controller_cpu(self.pid)
        return {
            "peakRssMiB": status_kib(self.pid, "VmHWM") / 1024,
            "peakGroupRssMiB": self.peak_group_kib / 1024,
            "cpuSeconds": own,
            "childCpuSeconds": children,
        }


def _start_controller(
    env: LocalEnvironment, work: Path, stack_workers: int | None
) -> tuple[Supervised, int]:
    settings = env.controller_settings().model_dump(mode="json", exclude_defaults=True)
    metrics_port = free_port()
    settings |= {  # model_dump spells fields in snake_case; so must these overrides
        "leader_election": {"enabled": False},
        "metrics_port": metrics_port,
        "health_port": free_port(),
        # The default, as production sweeps: each sweep lists every instance in every state
        # (the environment's 5 s, for tests, would make the bench measure the reaper).
        "reap_interval_seconds": int(
            Settings.model_fields["reap_interval"].default.total_seconds()
        ),
    }
    if stack_workers is not None:
        settings["stack_operations"] = {
            **settings.get("stack_operations", {}),
            "workers": stack_workers,
        }
    config = write_settings(work / "controller.yaml", settings)
    pulumi_root = toolchain.ensure_all()["pulumi"].binary.parent.parent
    child = start_controller(
        "controller",
        work / "logs" / "controller.log",
        kubeconfig=env.kubeconfig_path(),
        pulumi_root=pulumi_root,
        config=config,
        identity="bench-scale",
        passphrase="bench",
        region=env.region,
        metrics_port=metrics_port,
    )
    return child, metrics_port


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _quantile(samples: dict[Any, float], metric: str, q: float, **match: str) -> float:
    buckets = [
        (float(dict(labels)["le"]), value)
        for (name, labels), value in samples.items()
        if name == f"{metric}_bucket" and all(dict(labels).get(k) == v for k, v in match.items())
    ]
    return histogram_quantile(q, buckets)


# --- one run ---------------------------------------------------------------------------------


@dataclass
class Run:
    pools: int
    per_pool: int
    count: int
    work: Path
    stack_workers: int | None = None  # None: the controller's default (two per CPU)
    figures: dict[str, float] = field(default_factory=dict)

    def wait(self, what: str, probe: Callable[[], Any], timeout: float, every: float = 0.5) -> None:
        wait_for(what, probe, timeout, every=every, hint=f" (logs: {self.work})")

    @property
    def _listing_every(self) -> float:
        """How often a probe that lists every pool asks: each listing is every pool's body
        (10 KiB each) for the API server to send and this process to parse, on the cores
        the run measures; at 1,000 pools every 0.5 s was a load of its own."""
        return max(0.5, self.pools / 200)

    def execute(self) -> dict[str, float]:
        env = LocalEnvironment(
            work_dir=self.work,
            with_controller=False,
            join_delay=1.0,
            # Every wave, the floor wave last, runs on the sets the cold wave launched: they
            # must still be warm then. At 1,000 pools the cold wave and its records take
            # about half an hour here, and a 30m TTL let the sets go before the floor wave,
            # whose Jobs then waited for Nodes that were gone. The release deletes them all.
            keep_warm_ttl="6h",
            job_run_seconds=1.0,
            # The product's default: the simulated joins of hundreds of sets launched within
            # a minute lag behind on two cores, which is the simulator's pace, not the pool's.
            join_deadline_seconds=600,
            # Hundreds of Jobs: their status only, no Pod writes, no training controllers.
            simulate_pods=False,
            training_controllers=False,
        )
        child: Supervised | None = None
        try:
            env.start()
            assert env.control_plane is not None and env.nodes is not None
            env.nodes.poll_interval = 2.0  # hundreds of instances: a gentler poll
            env.emulator_client.set_default_capacity(10 * self.pools * self.count + 100)
            api = env.control_plane.api_client()
            custom = k8s.CustomObjectsApi(api)
            quota = ko.cluster_queue(
                ko.CLUSTER_QUEUE_NAME, ko.FLAVOR_NAME, ko.CHECK_NAME, self._quota()
            )
            custom.patch_cluster_custom_object(
                *KUEUE, "clusterqueues", ko.CLUSTER_QUEUE_NAME, {"spec": quota["spec"]}
            )
            timeline = Timeline(api, NAMESPACE, checks=(ko.CHECK_NAME, FLOOR_CHECK, EARLY_CHECK))
            timeline.start()
            cpu_before, machine_before = _cpu_by_kind(), machine_cpu()
            child, metrics_port = _start_controller(env, self.work, self.stack_workers)
            sampler = Sampler(child.pid)
            sampler.start()
            batch = k8s.BatchV1Api(api)
            names = [f"scale-{i}" for i in range(self.pools)]
            waves: list[list[str]] = []
            created: dict[str, float] = {}
            for wave in range(self.per_pool):
                jobs = [f"w{wave}-{pool}" for pool in names]
                waves.append(jobs)
                # Taken before the clock starts: the API server's metrics take a while.
                at_start = _WaveCounters.before_wave(api, env, child.pid)
                started = time.monotonic()
                for job, pool in zip(jobs, names, strict=True):
                    batch.create_namespaced_job(
                        NAMESPACE, ko.gang_job(NAMESPACE, job, ko.QUEUE_NAME, pool, self.count)
                    )
                    created[job] = time.monotonic()
                self.wait(f"wave {wave} finished", _all_finished(timeline, jobs), timeout=3600)
                jobs_done = _last_finished(timeline, jobs) - started
                self.wait(
                    f"wave {wave}: every pool warm",
                    lambda: _phases(custom) == {Phase.KEEP_WARM: self.pools},
                    timeout=600,
                    every=self._listing_every,
                )
                label = "cold" if wave == 0 else "warm"
                elapsed = time.monotonic() - started
                self._add(f"{label}WaveSeconds", elapsed)
                self._add(f"{label}WaveJobsSeconds", jobs_done)
                at_end = _WaveCounters.after_wave(api, env, child.pid)
                self._add_wave_cost(label, at_start, at_end)
                # A set's record in its stack is bookkeeping that runs after every prepare
                # (no gang waits for it): the next wave starts once the records are done, so
                # that it does not pay for them, and when they were is a figure of its own.
                self.wait(
                    f"wave {wave}: every set recorded",
                    lambda: _all_recorded(custom),
                    1800,
                    every=self._listing_every,
                )
                recorded = time.monotonic() - started
                self._add(f"{label}WaveRecordedSeconds", recorded)
                print(
                    f"  wave {wave + 1}/{self.per_pool} ({label}): {elapsed:.1f}s (its last Job "
                    f"finished at {jobs_done:.1f}s, every set recorded at {recorded:.1f}s), "
                    f"steal {at_end.machine.since(at_start.machine).stolen_percent:.0f} %",
                    file=sys.stderr,
                    flush=True,
                )
            if self.per_pool > 1:
                for key in [k for k in self.figures if k.startswith("warmWave")]:
                    self.figures[key] /= self.per_pool - 1
            for series in WITHOUT_US:
                at_start = _WaveCounters.before_wave(api, env, child.pid)
                self._wave_without_us(series, batch, custom, timeline, names)
                self._add_wave_cost(series, at_start, _WaveCounters.after_wave(api, env, child.pid))
            for series in ("cold", "warm", *WITHOUT_US):
                self._busy_percent(series)
            self._decision_latencies(timeline, waves)
            self._wave_stages(timeline, waves, created, names)
            metrics = _scrape(metrics_port)
            self._work_counts(metrics)
            for reconciler in RECONCILERS:
                for q in (0.5, 0.99):
                    self.figures[f"lag{reconciler}P{int(q * 100)}"] = _quantile(
                        metrics, "workqueue_queue_duration_seconds", q, name=reconciler
                    )
                    self.figures[f"work{reconciler}P{int(q * 100)}"] = _quantile(
                        metrics,
                        "controller_runtime_reconcile_time_seconds",
                        q,
                        controller=reconciler,
                    )
            for operation in STACK_OPERATIONS:
                for q in (0.5, 0.99):
                    self.figures[f"stack{operation}P{int(q * 100)}"] = _quantile(
                        metrics,
                        "atomic_gang_stack_operation_seconds",
                        q,
                        operation=operation,
                        result="succeeded",
                    )
            at_start = _WaveCounters.before_wave(api, env, child.pid)
            started = time.monotonic()
            for pool in names:
                custom.delete_cluster_custom_object(*GNP, pool)
            # One pool, not all: whether any is left is all the wait needs to know.
            self.wait(
                "every pool released",
                lambda: not custom.list_cluster_custom_object(*GNP, limit=1)["items"],
                timeout=3600,
            )
            self.figures["releaseSeconds"] = time.monotonic() - started
            self._add_wave_cost("release", at_start, _WaveCounters.after_wave(api, env, child.pid))
            self._busy_percent("release")
            self.figures |= sampler.finish()
            for kind, spent in _cpu_by_kind().items():
                self.figures[f"cpu:{kind}"] = spent - cpu_before.get(kind, 0.0)
            machine = machine_cpu().since(machine_before)
            self.figures["machineBusyPercent"] = machine.busy_percent
            self.figures["machineStolenPercent"] = machine.stolen_percent
            timeline.stop()
            self.figures["launched"] = float(_launched(env))
            # What loaded the emulator, by AWS call (it shares the cores with what is measured).
            for call, cost in env.emulator_client.request_costs().items():
                self.figures[f"emulatorCpu:{call}"] = float(cost["cpu_seconds"])
                self.figures[f"emulatorRequests:{call}"] = float(cost["requests"])
                for client, requests in cost.get("clients", {}).items():
                    self.figures[f"emulatorRequestsBy:{call}|{client}"] = float(requests)
            return self.figures
        finally:
            if child is not None:
                child.stop()
            env.stop()

    def _add(self, key: str, value: float) -> None:
        self.figures[key] = self.figures.get(key, 0.0) + value

    def _busy_percent(self, series: str) -> None:
        """The machine's busy and stolen shares over the `series` waves, from their sums."""
        if self.figures.get(f"{series}WaveMachineTotal"):
            used = MachineCpu(*(self.figures[f"{series}WaveMachine{k}"] for k in _MACHINE_KEYS))
            self.figures[f"{series}WaveBusyPercent"] = used.busy_percent
            self.figures[f"{series}WaveStolenPercent"] = used.stolen_percent

    def _add_wave_cost(self, label: str, start: _WaveCounters, end: _WaveCounters) -> None:
        """Add what one wave cost to the `label` series: each process's CPU, the machine's
        busy and total CPU, the API server's requests and the AWS calls."""
        for kind, seconds in _spent(start.cpu, end.cpu).items():
            self._add(f"{label}WaveCpu:{kind}", seconds)
        for key, value in zip(_MACHINE_KEYS, end.machine.since(start.machine), strict=True):
            self._add(f"{label}WaveMachine{key}", value)
        for key, value in _spent(start.requests, end.requests).items():
            if value:
                self._add(f"{label}WaveApi:{key}", value)

    def _wave_without_us(
        self,
        series: str,
        batch: k8s.BatchV1Api,
        custom: k8s.CustomObjectsApi,
        timeline: Timeline,
        pools: list[str],
    ) -> None:
        """One more wave of the same Jobs over the same warm Nodes on a queue without our
        check: with no check (`kueueAlone`), what Kueue and the Job simulator take alone;
        behind the bench's instant check (`floor`), what any AdmissionCheck adds to that;
        behind it answering before quota (`early`), what a check known before quota adds.
        No pool is claimed; the pools stay warm."""
        wave = WITHOUT_US[series]
        queue, cluster_queue, check = wave.queue, wave.cluster_queue, wave.check
        instant = None
        if check is not None:
            instant = InstantCheck(
                custom.api_client,
                NAMESPACE,
                check,
                before_quota=wave.before_quota,
                own_queue=queue if wave.before_quota else None,
            )
            instant.start()
        quota = ko.cluster_queue(cluster_queue, ko.FLAVOR_NAME, check, self._quota())
        custom.create_cluster_custom_object(*KUEUE, "clusterqueues", quota)
        custom.create_namespaced_custom_object(
            *KUEUE, NAMESPACE, "localqueues", ko.local_queue(NAMESPACE, queue, cluster_queue)
        )
        # The clock starts once Kueue takes the queue as Active (its check Active too): a
        # Job's wait for that is set-up, not admission.
        self.wait(
            f"{cluster_queue} Active",
            lambda: ko.is_active(custom, "clusterqueues", cluster_queue),
            timeout=120,
        )
        jobs = [f"{series.lower()}-{pool}" for pool in pools]
        created: dict[str, float] = {}
        started = time.monotonic()
        for job, pool in zip(jobs, pools, strict=True):
            # The pool label stays: the Job simulator runs a Job on its pool's Ready Nodes.
            batch.create_namespaced_job(
                NAMESPACE, ko.gang_job(NAMESPACE, job, queue, pool, self.count)
            )
            created[job] = time.monotonic()
        self.wait(f"the {series} wave finished", _all_finished(timeline, jobs), timeout=3600)
        self.figures[f"{series}WaveSeconds"] = time.monotonic() - started
        self.figures[f"{series}WaveJobsSeconds"] = _last_finished(timeline, jobs) - started
        if instant is not None:
            instant.stop()
        print(
            f"  {WITHOUT_US[series].label} wave: {self.figures[f'{series}WaveSeconds']:.1f}s",
            file=sys.stderr,
            flush=True,
        )
        marks = {job: timeline.workload(job) for job in jobs}
        for stage in (*KUEUE_ALONE_STAGES, "CheckListed", "CheckReady"):
            mark = _CHECK_MARKS.get(stage, stage)
            spans = [marks[job][mark] - created[job] for job in jobs if mark in marks[job]]
            if spans:
                self.figures[f"{series}Stage{stage}P50"] = percentile(spans, 50)
                self.figures[f"{series}Stage{stage}Last"] = max(spans)
        if check is not None:
            self.figures[f"{series}ReadyBeforeQuota"] = sum(map(ready_before_quota, marks.values()))
            self.figures[f"{series}AdmittedWithQuota"] = sum(
                map(admitted_with_reservation, marks.values())
            )

    def _quota(self) -> dict[str, str]:
        return {
            "cpu": str(2 * self.pools * self.count),
            "memory": f"{2 * self.pools * self.count}Gi",
        }

    def _decision_latencies(self, timeline: Timeline, waves: list[list[str]]) -> None:
        """Quota reserved -> our check Ready, per Workload (cold includes the acquisition)."""
        for label, jobs in (("cold", waves[0]), ("warm", [j for w in waves[1:] for j in w])):
            spans = []
            for job in jobs:
                marks = timeline.workload(job)
                if "QuotaReserved" in marks and "checkReady" in marks:
                    spans.append(marks["checkReady"] - marks["QuotaReserved"])
            self.figures[f"{label}CheckP50"] = percentile(spans, 50)
            self.figures[f"{label}CheckP99"] = percentile(spans, 99)

    def _wave_stages(
        self,
        timeline: Timeline,
        waves: list[list[str]],
        created: dict[str, float],
        pools: list[str],
    ) -> None:
        """When each Workload reached each stage, from its Job's creation: p50 and the last.

        The last one says which stage holds a wave back; a stage reached late by every
        Workload, after an early previous stage, is where the wave waits."""
        for label, picked in (("cold", waves[:1]), ("warm", waves[1:])):
            reached: dict[str, list[float]] = {stage: [] for stage, _ in STAGES}
            for wave in picked:
                for job, pool in zip(wave, pools, strict=True):
                    for stage, at in _stage_times(timeline, job, pool).items():
                        reached[stage].append(at - created[job])
            for stage, spans in reached.items():
                self.figures[f"{label}Stage{stage}P50"] = percentile(spans, 50)
                self.figures[f"{label}Stage{stage}Last"] = max(spans, default=float("nan"))

    def _work_counts(self, metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> None:
        """How much the controller did: passes per reconciler, EC2 listings per kind."""
        for (name, labels), value in metrics.items():
            found = dict(labels)
            if name == "controller_runtime_reconcile_total":
                key = f"passes{found.get('controller', '')}"
            elif name == "atomic_gang_instance_index_describes_total":
                key = f"describes{found.get('kind', '')}"
            else:
                continue
            self.figures[key] = self.figures.get(key, 0.0) + value


# The stack operations of a pool's life before its release, whose wall time under load
# (queued time excluded) the report prints.
STACK_OPERATIONS: Final = ("prepare", "record")


# Each stage a Workload goes through, and where its time is read: Kueue's conditions and our
# check on the Workload, the claimed pool's phases, and the pool's return to KeepWarm after
# the Job finished (which the next wave waits for).
STAGES: list[tuple[str, str]] = [
    ("QuotaReserved", "quota reserved (Kueue)"),
    ("Claimed", "pool claimed (Workload reconciler)"),
    ("Satisfied", "pool Satisfied (pool reconciler)"),
    ("CheckReady", "check Ready (Workload reconciler)"),
    ("Admitted", "Admitted (Kueue)"),
    ("Finished", "Job finished (Job simulator)"),
    ("KeepWarm", "pool back in KeepWarm (pool reconciler)"),
]


# The stages of a Job on a queue without our check: Kueue's and the Job simulator's only.
KUEUE_ALONE_STAGES: Final = ("QuotaReserved", "Admitted", "Finished")
# A check's stages in the waves behind the instant check, by the Timeline's mark: Kueue
# lists the check on the Workload (Pending), the instant check says Ready.
_CHECK_MARKS: Final = {"CheckListed": "checkPending", "CheckReady": "checkReady"}


# The waves without our check, as the report names them.
@dataclass(frozen=True)
class WaveWithoutUs:
    """A wave on a queue without our check: how the report names it, its queue and
    ClusterQueue, the instant check behind it (none for Kueue alone) and whether that check
    answers before quota."""

    label: str
    queue: str
    cluster_queue: str
    check: str | None = None
    before_quota: bool = False


WITHOUT_US: Final = {
    "kueueAlone": WaveWithoutUs("Kueue-alone", PLAIN_QUEUE, PLAIN_CLUSTER_QUEUE),
    "floor": WaveWithoutUs("AdmissionCheck floor", FLOOR_QUEUE, FLOOR_CLUSTER_QUEUE, FLOOR_CHECK),
    "early": WaveWithoutUs(
        "AdmissionCheck Ready before quota", EARLY_QUEUE, EARLY_CLUSTER_QUEUE, EARLY_CHECK, True
    ),
}


def _stage_times(timeline: Timeline, job: str, pool: str) -> dict[str, float]:
    marks = timeline.workload(job)
    workload = timeline.workload_name(job)
    phases = timeline.pool(pool)
    times = {
        "QuotaReserved": marks.get("QuotaReserved"),
        "Claimed": phases.get(f"claimed:{workload}"),
        "Satisfied": phases.get(f"{Phase.SATISFIED}:{workload}"),
        "CheckReady": marks.get("checkReady"),
        "Admitted": marks.get("Admitted"),
        "Finished": marks.get("Finished"),
    }
    finished = times["Finished"]
    if finished is not None:
        times["KeepWarm"] = timeline.entered(pool, Phase.KEEP_WARM, after=finished)
    return {stage: at for stage, at in times.items() if at is not None}


def _all_finished(timeline: Timeline, jobs: list[str]) -> Callable[[], bool]:
    return lambda: all(timeline.workload(job).get("Finished") for job in jobs)


def _last_finished(timeline: Timeline, jobs: list[str]) -> float:
    """When the last of `jobs` was seen Finished (monotonic): a wave measured to it is
    measured as the waves without our check are, whose end is their Jobs'."""
    return max(timeline.workload(job)["Finished"] for job in jobs)


def _all_recorded(custom: k8s.CustomObjectsApi) -> bool:
    """Whether every pool's active set is recorded in its stack."""
    for pool in custom.list_cluster_custom_object(*GNP)["items"]:
        status = pool.get("status") or {}
        if status.get("activeGroup") and status.get("recordedGroup") != status["activeGroup"]:
            return False
    return True


def _phases(custom: k8s.CustomObjectsApi) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pool in custom.list_cluster_custom_object(*GNP)["items"]:
        phase = (pool.get("status") or {}).get("phase", "")
        counts[phase] = counts.get(phase, 0) + 1
    return counts


def _launched(env: LocalEnvironment) -> int:
    return len(instances_tagged(env.ec2_client(), c.TAG_CLUSTER, env.cluster_name))


# --- report ----------------------------------------------------------------------------------

ROWS: list[tuple[str, str, str]] = [
    ("controller peak RSS", "peakRssMiB", "MiB"),
    ("controller + Pulumi children peak RSS (sampled)", "peakGroupRssMiB", "MiB"),
    ("controller CPU", "cpuSeconds", "s"),
    ("Pulumi children CPU", "childCpuSeconds", "s"),
    ("controller CPU per Workload", "cpuPerWorkloadMs", "ms"),
    *(
        (f"{kind} CPU", f"cpu:{kind}", "s")
        for kind in ("EC2 emulator", "kube-apiserver", "etcd", "Kueue manager")
    ),
    ("bench process CPU (node + Job simulators)", "cpu:bench process (node + Job simulators)", "s"),
    ("machine busy, all cores (%)", "machineBusyPercent", ""),
    ("CPU the hypervisor took from the cores, steal (%)", "machineStolenPercent", ""),
    ("reconcile lag p50, workload", "lagworkloadP50", "s"),
    ("reconcile lag p99, workload", "lagworkloadP99", "s"),
    ("reconcile lag p50, gangnodepool", "laggangnodepoolP50", "s"),
    ("reconcile lag p99, gangnodepool", "laggangnodepoolP99", "s"),
    ("reconcile lag p99, admissioncheck", "lagadmissioncheckP99", "s"),
    ("reconcile time p50, workload", "workworkloadP50", "s"),
    ("reconcile time p99, workload", "workworkloadP99", "s"),
    ("reconcile time p50, gangnodepool", "workgangnodepoolP50", "s"),
    ("reconcile time p99, gangnodepool", "workgangnodepoolP99", "s"),
    ("quota -> check Ready, warm p50", "warmCheckP50", "s"),
    ("quota -> check Ready, warm p99", "warmCheckP99", "s"),
    ("quota -> check Ready, cold p50 (acquisition)", "coldCheckP50", "s"),
    ("quota -> check Ready, cold p99 (acquisition)", "coldCheckP99", "s"),
    ("cold wave (all pools acquired, jobs run, every pool warm again)", "coldWaveSeconds", "s"),
    ("cold wave, until every set is recorded in its stack", "coldWaveRecordedSeconds", "s"),
    ("warm wave (mean; until every pool is warm again)", "warmWaveSeconds", "s"),
    ("Kueue-alone wave (same Jobs, queue without our check)", "kueueAloneWaveSeconds", "s"),
    ("AdmissionCheck floor wave (same Jobs, a check Ready at once)", "floorWaveSeconds", "s"),
    ("wave behind a check Ready before quota (same Jobs)", "earlyWaveSeconds", "s"),
    *(
        (f"{what}, to its last Job finished", f"{series}WaveJobsSeconds", "s")
        for series, what in (
            ("cold", "cold wave"),
            ("warm", "warm wave (mean)"),
            ("kueueAlone", "Kueue-alone wave"),
            ("floor", "floor wave"),
            ("early", "wave behind a check Ready before quota"),
        )
    ),
    *(
        row
        for series, what in (("floor", "floor wave"), ("early", "wave before quota"))
        for row in (
            (
                f"{what}: Workloads whose check was Ready before quota",
                f"{series}ReadyBeforeQuota",
                "",
            ),
            (f"{what}: Workloads admitted with the reservation", f"{series}AdmittedWithQuota", ""),
        )
    ),
    ("release of every pool (stack destroy)", "releaseSeconds", "s"),
    ("instances launched", "launched", ""),
    ("gangnodepool passes", "passesgangnodepool", ""),
    ("workload passes", "passesworkload", ""),
    ("admissioncheck passes", "passesadmissioncheck", ""),
    *(
        (f"stack operation {q}, {operation} (executor, not queued)", f"stack{operation}{k}", "s")
        for operation in STACK_OPERATIONS
        for q, k in (("p50", "P50"), ("p99", "P99"))
    ),
    ("EC2 listings, one pool", "describespool", ""),
    ("EC2 listings, every pool (index snapshot)", "describessnapshot", ""),
    ("EC2 listings, every pool's instances not running (index changes)", "describeschanges", ""),
]
# CPU a wave cost each process: a warm wave (the mean) against the Kueue-alone one, to say
# which process our check's work lands on.
_WAVE_CPU_KINDS = (
    "controller",
    "controller's Pulumi children",
    "kube-apiserver",
    "etcd",
    "Kueue manager",
    "EC2 emulator",
    "bench process (node + Job simulators)",
)
for _series, _name in (
    ("cold", "the cold wave"),
    ("warm", "a warm wave"),
    ("kueueAlone", "the Kueue-alone wave"),
    ("floor", "the floor wave"),
    ("early", "the wave behind a check Ready before quota"),
    ("release", "the release of every pool"),
):
    for _kind in _WAVE_CPU_KINDS:
        ROWS.append((f"CPU of {_name}, {_kind}", f"{_series}WaveCpu:{_kind}", "s"))
    ROWS.append((f"CPU of {_name}, whole machine", f"{_series}WaveMachineBusy", "s"))
    ROWS.append((f"machine busy during {_name} (%)", f"{_series}WaveBusyPercent", ""))
    ROWS.append((f"steal during {_name} (%)", f"{_series}WaveStolenPercent", ""))
for _series in ("cold", "warm", *WITHOUT_US):
    for _stage, _what in STAGES:
        if _series == "kueueAlone" and _stage not in KUEUE_ALONE_STAGES:
            continue
        if _series in WITHOUT_US and _stage not in (*KUEUE_ALONE_STAGES, "CheckReady"):
            continue
        if _series in WITHOUT_US and _stage == "CheckReady":
            _what = "check Ready (the bench's instant check)"
            _listed = "its check listed on the Workload, Pending (Kueue)"
            ROWS.append(
                (f"{_series}: Job created -> {_listed}, p50", f"{_series}StageCheckListedP50", "s")
            )
            ROWS.append(
                (f"{_series}: ... the last Workload", f"{_series}StageCheckListedLast", "s")
            )
        ROWS.append((f"{_series}: Job created -> {_what}, p50", f"{_series}Stage{_stage}P50", "s"))
        ROWS.append((f"{_series}: ... the last Workload", f"{_series}Stage{_stage}Last", "s"))


# The emulator's costliest AWS calls in the largest run get a row each.
EMULATOR_CALL_ROWS = 8


# The most frequent API server requests and watch events, and AWS calls, in a warm wave get
# a row each, beside the same in the Kueue-alone wave.
APISERVER_ROWS = 16
AWS_ROWS = 8
# The cold wave's and the release's (`_whole_wave_rows`): fewer API server rows, AWS_ROWS alike.
WHOLE_WAVE_ROWS = 6


def _most_frequent(
    figures: dict[str, float], series: str, apiserver_rows: int
) -> tuple[list[str], list[str]]:
    """The `series` wave's requests counted the most: its API server requests and watch
    events, then its AWS calls (`AWS_ROWS`), each most frequent first."""
    prefix = f"{series}WaveApi:"
    keys = sorted(
        (key[len(prefix) :] for key in figures if key.startswith(prefix)),
        key=lambda key: -figures[f"{prefix}{key}"],
    )
    aws = [key for key in keys if key.startswith("AWS ")][:AWS_ROWS]
    return [key for key in keys if not key.startswith("AWS ")][:apiserver_rows], aws


def _where(key: str) -> str:
    return "" if key.startswith("AWS ") else "apiserver "


def _apiserver_rows(figures: dict[str, float]) -> list[tuple[str, str, str]]:
    kube, aws = _most_frequent(figures, "warm", APISERVER_ROWS)
    rows = []
    for key in kube + aws:
        rows.append((f"{_where(key)}{key}, a warm wave", f"warmWaveApi:{key}", ""))
        rows.append(("  ... the Kueue-alone wave", f"kueueAloneWaveApi:{key}", ""))
        rows.append(("  ... the floor wave", f"floorWaveApi:{key}", ""))
        rows.append(("  ... the wave behind a check Ready before quota", f"earlyWaveApi:{key}", ""))
    return rows


def _whole_wave_rows(
    figures: dict[str, float], series: str, name: str
) -> list[tuple[str, str, str]]:
    """A wave's most frequent AWS calls (S3 and KMS among them: the cold wave's prepares and
    records, the release's destroys) and API server requests, counted over the whole wave."""
    kube, aws = _most_frequent(figures, series, WHOLE_WAVE_ROWS)
    return [(f"{_where(key)}{key}, {name}", f"{series}WaveApi:{key}", "") for key in aws + kube]


def _emulator_rows(figures: dict[str, float]) -> list[tuple[str, str, str]]:
    calls = sorted(
        (key.split(":", 1)[1] for key in figures if key.startswith("emulatorCpu:")),
        key=lambda call: -figures[f"emulatorCpu:{call}"],
    )
    rows = []
    for call in calls[:EMULATOR_CALL_ROWS]:
        rows.append((f"EC2 emulator CPU, {call}", f"emulatorCpu:{call}", "s"))
        rows.append((f"EC2 emulator requests, {call}", f"emulatorRequests:{call}", ""))
        # ... and who made them (the access key: the controller and its Pulumi children
        # sign as "local", the node simulator as itself).
        by = f"emulatorRequestsBy:{call}|"
        for key in sorted(k for k in figures if k.startswith(by)):
            rows.append((f"  ... by {key[len(by) :]}", key, ""))
    return rows


def _cell(value: float, unit: str) -> str:
    """Seconds to the ms under 10 s and to the tenth under 100 s (a wave's target is within
    a second of it); everything else whole."""
    if unit == "s" and value < 10:
        return f"{value:.3f}"
    if unit == "s" and value < 100:
        return f"{value:.1f}"
    return f"{value:.0f}"


def _report(runs: list[tuple[str, dict[str, float]]]) -> str:
    header = ["figure", *(name for name, _ in runs)]
    if len(runs) == 2:
        header.append("ratio")
    rows = []
    last = runs[-1][1]
    extra = (
        _apiserver_rows(last)
        + _whole_wave_rows(last, "cold", "the cold wave")
        + _whole_wave_rows(last, "release", "the release")
        + _emulator_rows(last)
    )
    for label, key, unit in ROWS + extra:
        values = [figures.get(key, float("nan")) for _, figures in runs]
        cells = [_cell(v, unit) for v in values]
        row = [f"{label}{f' ({unit})' if unit else ''}", *cells]
        if len(runs) == 2:
            row.append(ratio(values[1], values[0]))
        rows.append(row)
    return table(header, rows)


# The figures a run is compared on (issue #43's must-shows), by the key `Run` writes.
_KEY_FIGURES: tuple[tuple[str, str], ...] = (
    ("warm wave s", "warmWaveSeconds"),
    ("Kueue-alone wave s", "kueueAloneWaveSeconds"),
    ("AdmissionCheck floor wave s", "floorWaveSeconds"),
    ("check Ready before quota wave s", "earlyWaveSeconds"),
    ("cold wave s", "coldWaveSeconds"),
    ("pool lag p99 s", "laggangnodepoolP99"),
    ("workload lag p99 s", "lagworkloadP99"),
    ("controller peak RSS MiB", "peakRssMiB"),
    ("release of every pool s", "releaseSeconds"),
    ("kube-apiserver CPU s", "cpu:kube-apiserver"),
    ("controller CPU per Workload ms", "cpuPerWorkloadMs"),
    # Not ours: how much of the machine the hypervisor took, which every time above pays.
    ("steal %", "machineStolenPercent"),
)


def key_figures(pools: int, figures: dict[str, float]) -> dict[str, float]:
    """The figures a run of `pools` pools is compared on, named for its size (a 1,000-pool
    run is compared with a 1,000-pool baseline), with the warm wave against Kueue alone;
    a figure the run did not measure is left out."""
    out = {f"{pools} pools: {name}": figures[key] for name, key in _KEY_FIGURES if key in figures}
    warm, alone = figures.get("warmWaveSeconds"), figures.get("kueueAloneWaveSeconds")
    if warm is not None and alone:
        out[f"{pools} pools: warm wave / Kueue alone"] = warm / alone
    floor = figures.get("floorWaveSeconds")
    if floor and alone:
        out[f"{pools} pools: floor wave / Kueue alone"] = floor / alone
    if warm is not None and floor:
        out[f"{pools} pools: warm wave / floor wave"] = warm / floor
    early = figures.get("earlyWaveSeconds")
    if early and alone:
        out[f"{pools} pools: check Ready before quota wave / Kueue alone"] = early / alone
    # Each wave to its last Job finished: ours without the claims' release after it, as the
    # waves without our check end (they hold no pool).
    jobs = {s: figures.get(f"{s}WaveJobsSeconds") for s in ("warm", "kueueAlone", "floor")}
    if jobs["warm"] is not None and jobs["kueueAlone"]:
        out[f"{pools} pools: warm / Kueue alone, Jobs done"] = jobs["warm"] / jobs["kueueAlone"]
    if jobs["warm"] is not None and jobs["floor"]:
        out[f"{pools} pools: warm / floor, Jobs done"] = jobs["warm"] / jobs["floor"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=200)
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--baseline-pools", type=int, default=20, help="0: no baseline run")
    parser.add_argument("--count", type=int, default=2, help="nodes per gang")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--stack-workers",
        type=int,
        help="the executor's workers, stackOperations.workers (default: the controller's)",
    )
    parser.add_argument(
        "--record", action="store_true", help="keep this run's key figures as the baseline"
    )
    args = parser.parse_args(argv)
    ran_on = baselines.commit()  # what the figures measure, whatever is committed meanwhile
    if args.stack_workers is not None and args.stack_workers < 1:
        parser.error("--stack-workers must be at least 1")
    if args.pools < 1 or args.workloads < args.pools or args.workloads % args.pools:
        parser.error("--workloads must be a positive multiple of --pools")
    per_pool = args.workloads // args.pools
    sizes = [args.baseline_pools] if args.baseline_pools else []
    sizes.append(args.pools)
    logging.basicConfig(level=logging.WARNING)
    runs: list[tuple[str, dict[str, float]]] = []
    for pools in sizes:
        work = Path(tempfile.mkdtemp(prefix=f"bench-scale-{pools}-"))
        (work / "logs").mkdir()
        label = f"{pools} pools / {pools * per_pool} Workloads"
        print(f"{label}: starting", file=sys.stderr, flush=True)
        started = time.monotonic()
        figures = Run(pools, per_pool, args.count, work, args.stack_workers).execute()
        figures["cpuPerWorkloadMs"] = 1000 * figures["cpuSeconds"] / (pools * per_pool)
        figures["wallSeconds"] = time.monotonic() - started
        print(f"{label}: done in {figures['wallSeconds']:.0f}s", file=sys.stderr, flush=True)
        runs.append((label, figures))
        shutil.rmtree(work, ignore_errors=True)
    workers = args.stack_workers or "the default"
    print(
        f"one controller process, gangs of {args.count}, {os.cpu_count()} cores, "
        f"stack executor workers: {workers}"
    )
    print(_report(runs))
    print(
        "reconcile lag and time from the controller's own histograms, interpolated as "
        "Prometheus does; lag buckets are client-go's decades (10 ns .. 1,000 s), so a lag "
        "figure says its decade (a p99 of 66 s: between 10 and 100 s), not more"
    )
    if args.json:
        args.json.write_text(json.dumps(dict(runs), indent=1))
    # The main run's figures against the recorded ones (the baseline-size run is its own
    # side-by-side comparison, above). A record keeps the figures of the sizes it did not
    # measure when they are this machine's (`baselines.kept_beside`).
    figures = key_figures(args.pools, runs[-1][1])
    print("\n" + "\n".join(baselines.comparison("bench_scale", figures)))
    refused = baselines.refusal(runs[-1][1].get("machineStolenPercent"))
    if args.record and refused:
        print(refused)
    elif args.record:
        kept, dropped = baselines.kept_beside("bench_scale", figures)
        if dropped:
            print(dropped)
        path = baselines.record("bench_scale", figures, ran_on=ran_on, kept=kept)
        print(f"Recorded as the baseline: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
