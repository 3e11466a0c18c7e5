"""Runs admitted gang Jobs to completion, standing in for kubelet and the Job controller.

Started by `LocalEnvironment` (the embedded default, the demo, e2e tests). Nothing in the
local environment creates pods, so a Job Kueue has unsuspended would never finish and its
Workload would hold its quota and its pool forever. Once a Job is unsuspended and its
pool's nodes (labelled with the Job's pool, as many Ready as the Job's parallelism) exist,
this marks it started; `run_seconds` later it writes the status the Job controller writes
for a successful Job, which the apiserver validates: startTime, succeeded and
completedIndexes, SuccessCriteriaMet then Complete, completionTime. Kueue then finishes the
Workload, which drops our claim on the pool.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

from provisioner.api import constants as c

log = logging.getLogger("atomic-gang.jobsim")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _finished(job: Any) -> bool:
    conditions = (job.status and job.status.conditions) or []
    return any(x.type in ("Complete", "Failed") and x.status == "True" for x in conditions)


@dataclass
class JobSimulator:
    """Finishes each running gang Job `run_seconds` after its nodes are there."""

    api: k8s.ApiClient
    run_seconds: float = 3.0
    poll_interval: float = 0.5
    _started: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="jobsim", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # the next pass retries; one bad read must not end it
                log.warning("job simulator pass failed: %s", exc)
            self._stop.wait(self.poll_interval)

    def run_once(self) -> None:
        batch = k8s.BatchV1Api(self.api)
        jobs = batch.list_job_for_all_namespaces(label_selector=c.POOL_LABEL).items
        live: set[str] = set()
        for job in jobs:
            key = f"{job.metadata.namespace}/{job.metadata.name}/{job.metadata.uid}"
            live.add(key)
            if job.spec.suspend or _finished(job):
                continue
            width = int(job.spec.parallelism or 1)
            if key not in self._started:
                if self._ready_nodes(job.metadata.labels[c.POOL_LABEL]) < width:
                    continue
                self._started[key] = time.monotonic()
                self._mark_started(batch, job)
            elif time.monotonic() - self._started[key] >= self.run_seconds:
                self._complete(batch, job, width)
        for gone in set(self._started) - live:
            del self._started[gone]

    def _ready_nodes(self, pool: str) -> int:
        nodes = k8s.CoreV1Api(self.api).list_node(label_selector=f"{c.POOL_LABEL}={pool}").items
        return sum(
            1
            for node in nodes
            if any(x.type == "Ready" and x.status == "True" for x in node.status.conditions or [])
        )

    def _mark_started(self, batch: k8s.BatchV1Api, job: Any) -> None:
        # The Job controller sets startTime when it first runs an unsuspended Job; setting
        # it later than that is refused, so only when it is still unset.
        if job.status and job.status.start_time:
            return
        width = int(job.spec.parallelism or 1)
        batch.patch_namespaced_job_status(
            job.metadata.name,
            job.metadata.namespace,
            {"status": {"startTime": _now(), "active": width}},
        )

    def _complete(self, batch: k8s.BatchV1Api, job: Any, width: int) -> None:
        now = _now()
        completions = int(job.spec.completions or width)
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
        if job.spec.completion_mode == "Indexed":
            status["completedIndexes"] = "0" if completions == 1 else f"0-{completions - 1}"
        batch.patch_namespaced_job_status(
            job.metadata.name, job.metadata.namespace, {"status": status}
        )
        log.info("job %s/%s completed", job.metadata.namespace, job.metadata.name)


def _condition(kind: str, reason: str, now: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": "Reached expected number of succeeded pods",
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }
