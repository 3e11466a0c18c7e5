"""Runs admitted gang Jobs to completion, standing in for kubelet and the Job controller.

Started by `LocalEnvironment` (the embedded default, the demo, e2e tests). Nothing in the
local environment creates pods, so a Job Kueue has unsuspended would never finish and its
Workload would hold its quota and its pool forever. Once a Job is unsuspended and its
pool's nodes (labelled with the Job's pool, as many Ready as the Job's parallelism) exist,
this marks it started (and stopped again when Kueue suspends it, evicting its Workload);
`run_seconds` later it writes the status the Job controller writes for a successful Job,
which the apiserver validates: startTime, succeeded and completedIndexes,
SuccessCriteriaMet then Complete, completionTime. Kueue then finishes the
Workload, which drops our claim on the pool.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

from provisioner.api import constants as c
from provisioner.kube.client import KubeClient
from provisioner.kube.informer import Informer
from provisioner.kube.resources import JOBS, NODES

log = logging.getLogger("atomic-gang.jobsim")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _true(obj: dict[str, Any], kinds: tuple[str, ...]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(x.get("type") in kinds and x.get("status") == "True" for x in conditions)


@dataclass
class JobSimulator:
    """Finishes each running gang Job `run_seconds` after its nodes are there.

    Jobs and pool Nodes are read from two informers (a list, then a watch), as the Job
    controller reads them: a pass over hundreds of Jobs costs no apiserver list and no
    model decoding, so a large benchmark measures the controller, not this simulator."""

    api: k8s.ApiClient
    run_seconds: float = 3.0
    poll_interval: float = 0.5
    _started: dict[str, float] = field(default_factory=dict)
    # Completed by us: the cache may not show it for a pass or two, and it is written once.
    _completed: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _jobs: Informer | None = None
    _nodes: Informer | None = None
    # A wave of hundreds of Jobs starts and finishes at once: one write at a time, each a
    # round trip to a busy apiserver, made the last Job of a wave finish tens of seconds
    # after its first.
    write_threads: int = 8

    def start(self) -> None:
        kube = KubeClient(self.api)
        self._jobs = Informer(
            kube.list_watch(JOBS, label_selector=c.POOL_LABEL), name="jobsim-jobs"
        )
        self._nodes = Informer(
            kube.list_watch(NODES, label_selector=c.POOL_LABEL), name="jobsim-nodes"
        )
        for informer in (self._jobs, self._nodes):
            informer.start()
        self._thread = threading.Thread(target=self._loop, name="jobsim", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for informer in (self._jobs, self._nodes):
            if informer is not None:
                informer.stop()

    def _loop(self) -> None:
        assert self._jobs is not None and self._nodes is not None
        for informer in (self._jobs, self._nodes):
            informer.wait_for_sync(timeout=60)
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # the next pass retries; one bad write must not end it
                log.warning("job simulator pass failed: %s", exc)
            self._stop.wait(self.poll_interval)

    def run_once(self) -> None:
        assert self._jobs is not None and self._nodes is not None
        batch = k8s.BatchV1Api(self.api)
        ready = self._ready_nodes_by_pool()
        live: set[str] = set()
        starting: dict[str, Future[None]] = {}
        completing: dict[str, Future[None]] = {}
        with ThreadPoolExecutor(self.write_threads, thread_name_prefix="jobsim-write") as writes:
            for job in self._jobs.list():
                meta, spec = job["metadata"], job.get("spec") or {}
                key = f"{meta['namespace']}/{meta['name']}/{meta['uid']}"
                live.add(key)
                if key in self._completed:
                    continue
                if spec.get("suspend"):
                    # Kueue suspends a Job whose Workload it evicts, and frees the quota once
                    # the Job has no active pods: stop it, as the Job controller does.
                    self._started.pop(key, None)
                    if (job.get("status") or {}).get("active"):
                        starting[key] = writes.submit(self._mark_suspended, batch, job)
                    continue
                if _true(job, ("Complete", "Failed")):
                    continue
                width = int(spec.get("parallelism") or 1)
                if key not in self._started:
                    if ready.get((meta.get("labels") or {}).get(c.POOL_LABEL, ""), 0) < width:
                        continue
                    self._started[key] = time.monotonic()
                    starting[key] = writes.submit(self._mark_started, batch, job)
                elif time.monotonic() - self._started[key] >= self.run_seconds:
                    completing[key] = writes.submit(self._complete, batch, job, width)
        for key, done in starting.items():
            if done.exception() is not None:
                log.warning("job simulator could not start %s: %s", key, done.exception())
        for key, done in completing.items():
            if done.exception() is None:
                self._completed.add(key)  # else the next pass writes it again
            else:
                log.warning("job simulator could not complete %s: %s", key, done.exception())
        for gone in set(self._started) - live:
            del self._started[gone]
        self._completed &= live

    def _ready_nodes_by_pool(self) -> dict[str, int]:
        assert self._nodes is not None
        counts: dict[str, int] = {}
        for node in self._nodes.list():
            if _true(node, ("Ready",)):
                pool = (node["metadata"].get("labels") or {}).get(c.POOL_LABEL, "")
                counts[pool] = counts.get(pool, 0) + 1
        return counts

    def _mark_started(self, batch: k8s.BatchV1Api, job: dict[str, Any]) -> None:
        # The Job controller sets startTime when it first runs an unsuspended Job; setting
        # it later than that is refused, so only when it is still unset.
        if (job.get("status") or {}).get("startTime"):
            return
        width = int(job["spec"].get("parallelism") or 1)
        batch.patch_namespaced_job_status(
            job["metadata"]["name"],
            job["metadata"]["namespace"],
            {"status": {"startTime": _now(), "active": width}},
            _preload_content=False,  # the answer is not read: no model decoding
        )

    def _mark_suspended(self, batch: k8s.BatchV1Api, job: dict[str, Any]) -> None:
        # The Job controller deletes a suspended Job's pods and resets its startTime (the
        # Job documentation: "its .status.startTime field will be reset" on resume).
        batch.patch_namespaced_job_status(
            job["metadata"]["name"],
            job["metadata"]["namespace"],
            {"status": {"active": 0, "startTime": None}},
            _preload_content=False,
        )

    def _complete(self, batch: k8s.BatchV1Api, job: dict[str, Any], width: int) -> None:
        now = _now()
        spec = job["spec"]
        completions = int(spec.get("completions") or width)
        status: dict[str, Any] = {
            "active": 0,
            "ready": 0,
            "succeeded": completions,
            "conditions": [
                _condition("SuccessCriteriaMet", "CompletionsReached", now),
                _condition("Complete", "CompletionsReached", now),
            ],
            "completionTime": now,
        }
        if spec.get("completionMode") == "Indexed":
            status["completedIndexes"] = "0" if completions == 1 else f"0-{completions - 1}"
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        batch.patch_namespaced_job_status(
            name, namespace, {"status": status}, _preload_content=False
        )
        log.info("job %s/%s completed", namespace, name)


def _condition(kind: str, reason: str, now: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": "Reached expected number of succeeded pods",
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }
