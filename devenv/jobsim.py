"""Runs admitted Jobs to completion, standing in for the Job controller.

Started by `LocalEnvironment` (the embedded default, the demo, e2e tests). No Job
controller runs here (`controlplane.py`), so a Job Kueue has unsuspended would never finish
and its Workload would hold its quota and its pool forever. That holds for a gang's plain
Job and for the Jobs the real JobSet controller makes for a JobSet (a TrainJob's too, which
Trainer runs as a JobSet); their JobSet, and Trainer's TrainJob, are completed by those
controllers once these Jobs are.

Two ways, chosen by `pods`:
- `pods=True` (the embedded default and the e2e tests): as the Job controller does, it
  creates each running Job's Pods from its template (an Indexed Job's with their completion
  index and hostname), which the pod simulator (`podsim.py`, the scheduler and kubelet)
  places on the gang's Nodes and runs; it writes the Job's status from them (startTime,
  active, ready, succeeded, completedIndexes, then SuccessCriteriaMet and Complete with
  completionTime), and deletes them when Kueue suspends the Job (evicting its Workload).
- `pods=False` (the large benches: no Pod writes): once the Job's pool has as many Ready
  Nodes as its parallelism it marks the Job started, and `run_seconds` later writes the same
  successful status directly. Only Jobs labelled with a pool are run this way.

Either way the apiserver validates what is written, Kueue then finishes the Workload, which
drops our claim on the pool. Nothing here fails a Job or retries a Pod.
"""

from __future__ import annotations

import copy
import logging
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devenv.podsim import PODS
from devenv.simulator_loop import SimulatorLoop
from provisioner.api import constants as c
from provisioner.kube.client import KubeClient
from provisioner.kube.informer import Informer
from provisioner.kube.resources import JOBS, NODES

# What the Job controller puts on an Indexed Job's Pods (the Job documentation's "Completion
# mode" section): the index as an annotation and a label.
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# How long a Pod this simulator created counts as there before the cache shows it.
_EXPECTATION_SECONDS = 30.0

log = logging.getLogger("atomic-gang.jobsim")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _true(obj: dict[str, Any], kinds: tuple[str, ...]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(x.get("type") in kinds and x.get("status") == "True" for x in conditions)


@dataclass
class JobSimulator(SimulatorLoop):
    """Runs each unsuspended Job: through its Pods (`pods`), or by writing its status
    `run_seconds` after its pool's Nodes are there.

    Jobs, Pods and pool Nodes are read from informers (a list, then a watch), as the Job
    controller reads them: a pass over hundreds of Jobs costs no apiserver list and no
    model decoding, so a large benchmark measures the controller, not this simulator."""

    thread_name = "jobsim"
    what = "job simulator"
    logger = log

    pods: bool = False
    _started: dict[str, float] = field(default_factory=dict)
    # Completed by us: the cache may not show it for a pass or two, and it is written once.
    _completed: set[str] = field(default_factory=set)
    _jobs: Informer | None = None
    _nodes: Informer | None = None
    _pods: Informer | None = None
    # Pods created here that the cache does not show yet, by Job uid: name -> (completion
    # index or None, when created). Without them a lagging cache would make a Pod twice.
    _expected: dict[str, dict[str, tuple[int | None, float]]] = field(default_factory=dict)

    def _open_informers(self, kube: KubeClient) -> list[Informer]:
        # With Pods, every Job is read: a JobSet's child Jobs carry no pool label, only their
        # Pod template's nodeSelector names the pool (`_is_gang_job`).
        self._jobs = Informer(
            kube.list_watch(JOBS, label_selector=None if self.pods else c.POOL_LABEL),
            name="jobsim-jobs",
        )
        self._nodes = Informer(
            kube.list_watch(NODES, label_selector=c.POOL_LABEL), name="jobsim-nodes"
        )
        if not self.pods:
            return [self._jobs, self._nodes]
        self._pods = Informer(kube.list_watch(PODS), name="jobsim-pods")
        return [self._jobs, self._nodes, self._pods]

    def run_once(self) -> None:
        if self.pods:
            self._run_pods_once()
        else:
            self._run_status_once()

    def _run_status_once(self) -> None:
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

    # -- with Pods: the Job controller's part -------------------------------------------------
    def _run_pods_once(self) -> None:
        assert self._jobs is not None and self._pods is not None
        batch, core = k8s.BatchV1Api(self.api), k8s.CoreV1Api(self.api)
        owned: dict[str, list[dict[str, Any]]] = {}
        for pod in self._pods.list():
            for ref in pod["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "Job" and ref.get("controller"):
                    owned.setdefault(ref["uid"], []).append(pod)
        live: set[str] = set()
        with ThreadPoolExecutor(self.write_threads, thread_name_prefix="jobsim-write") as writes:
            for job in self._jobs.list():
                uid = job["metadata"]["uid"]
                live.add(uid)
                if uid in self._completed or _true(job, ("Complete", "Failed")):
                    continue
                if not _is_gang_job(job):
                    continue
                self._sync_job(writes, batch, core, job, owned.get(uid, []))
        for gone in set(self._expected) - live:
            del self._expected[gone]
        self._completed &= live

    def _sync_job(
        self,
        writes: ThreadPoolExecutor,
        batch: k8s.BatchV1Api,
        core: k8s.CoreV1Api,
        job: dict[str, Any],
        pods: list[dict[str, Any]],
    ) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        status = job.get("status") or {}
        uid = meta["uid"]
        alive = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]
        if spec.get("suspend"):
            # Kueue suspends a Job whose Workload it evicts, and frees the quota once the Job
            # has no active Pods: the Job controller deletes them and resets startTime (the
            # Job documentation: "its .status.startTime field will be reset" on resume).
            self._expected.pop(uid, None)
            for pod in alive:
                writes.submit(self._delete_pod, core, pod)
            if status.get("active") or status.get("startTime") or status.get("ready"):
                writes.submit(self._logged, "suspend", self._mark_suspended, batch, job)
            return
        indexed = spec.get("completionMode") == "Indexed"
        parallelism = int(spec.get("parallelism") or 1)
        completions = int(spec.get("completions") or parallelism)
        succeeded_indexes = {
            _index(p) for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"
        }
        succeeded = (
            len(succeeded_indexes - {None})
            if indexed
            else sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        )
        expected = self._expected.setdefault(uid, {})
        seen = {p["metadata"]["name"] for p in pods}
        for name in list(expected):
            if name in seen or time.monotonic() - expected[name][1] > _EXPECTATION_SECONDS:
                del expected[name]
        if succeeded >= completions:
            self._completed.add(uid)
            writes.submit(self._complete_once, batch, job, completions)
            return
        running = {_index(p) for p in alive} | {i for i, _ in expected.values()}
        active = len(alive) + len(expected)
        wanted: list[int | None] = []
        if indexed:
            wanted += [
                i for i in range(completions) if i not in succeeded_indexes and i not in running
            ]
        else:
            wanted += [None] * (completions - succeeded - active)
        for index in wanted[: max(0, parallelism - active)]:
            body = _pod_for(job, index)
            name = body["metadata"]["name"]
            expected[name] = (index, time.monotonic())
            writes.submit(self._create_pod, core, job, body, uid)
        ready = sum(1 for p in alive if _true(p, ("Ready",)))
        active = len(alive) + len(expected)
        new: dict[str, Any] = {"active": active, "ready": ready, "succeeded": succeeded}
        if indexed and succeeded:
            new["completedIndexes"] = _index_ranges(i for i in succeeded_indexes if i is not None)
        if not status.get("startTime"):
            # The Job controller sets startTime when it first runs an unsuspended Job.
            new["startTime"] = _now()
        if any(status.get(k, 0 if k != "completedIndexes" else None) != v for k, v in new.items()):
            writes.submit(self._logged, "update", self._patch_status, batch, job, new)

    @staticmethod
    def _logged(
        what: str, step: Any, batch: k8s.BatchV1Api, job: dict[str, Any], *args: Any
    ) -> None:
        try:
            step(batch, job, *args)
        except Exception as exc:  # the next pass writes it again
            log.warning("job simulator could not %s %s: %s", what, job["metadata"]["name"], exc)

    def _complete_once(self, batch: k8s.BatchV1Api, job: dict[str, Any], completions: int) -> None:
        try:
            self._complete(batch, job, completions)
        except Exception as exc:
            self._completed.discard(job["metadata"]["uid"])  # the next pass writes it again
            log.warning("job simulator could not complete %s: %s", job["metadata"]["name"], exc)

    def _create_pod(
        self, core: k8s.CoreV1Api, job: dict[str, Any], body: dict[str, Any], uid: str
    ) -> None:
        try:
            core.create_namespaced_pod(job["metadata"]["namespace"], body, _preload_content=False)
        except ApiException as err:
            self._expected.get(uid, {}).pop(body["metadata"]["name"], None)
            if err.status != 409:
                log.warning("job simulator could not create a Pod of %s: %s", uid, err.reason)

    @staticmethod
    def _delete_pod(core: k8s.CoreV1Api, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            core.delete_namespaced_pod(meta["name"], meta["namespace"], _preload_content=False)
        except ApiException as err:
            if err.status != 404:
                log.warning("job simulator could not delete Pod %s: %s", meta["name"], err.reason)

    @staticmethod
    def _patch_status(batch: k8s.BatchV1Api, job: dict[str, Any], status: dict[str, Any]) -> None:
        batch.patch_namespaced_job_status(
            job["metadata"]["name"],
            job["metadata"]["namespace"],
            {"status": status},
            _preload_content=False,
        )

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
            # ready too: the apiserver refuses more ready Pods than active ones.
            {"status": {"active": 0, "ready": 0, "startTime": None}},
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


def _is_gang_job(job: dict[str, Any]) -> bool:
    """A Job of a gang: labelled with its pool, or (a JobSet's child Job) whose Pods'
    nodeSelector names one. Other Jobs are left alone: their Pods would never be placed
    here, and the shared test control plane keeps other suites' Jobs."""
    if c.POOL_LABEL in (job["metadata"].get("labels") or {}):
        return True
    template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    return c.POOL_LABEL in (template.get("nodeSelector") or {})


def _index(pod: dict[str, Any]) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX)
    return int(value) if value is not None and value.isdigit() else None


def _index_ranges(indexes: Any) -> str:
    """Indexes as the Job status writes them: "0-2,5"."""
    ordered = sorted(set(indexes))
    parts: list[str] = []
    start = prev = None
    for i in ordered:
        if start is None:
            start = prev = i
        elif i == prev + 1:  # type: ignore[operator]
            prev = i
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def _pod_for(job: dict[str, Any], index: int | None) -> dict[str, Any]:
    """One Pod of `job`, from its template, as the Job controller makes it: owned by the Job
    (controller), named `<job>-<index>-<suffix>` (Indexed) or `<job>-<suffix>`, an Indexed
    Pod with its completion index (annotation and label) and hostname `<job>-<index>`."""
    meta = job["metadata"]
    template = copy.deepcopy(job["spec"]["template"])
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    spec = template.get("spec") or {}
    stem = meta["name"] if index is None else f"{meta['name']}-{index}"
    if index is not None:
        labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
        spec.setdefault("hostname", stem)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            # A name of our own making (not generateName), so the expectation can be matched.
            "name": f"{stem}-{uuid.uuid4().hex[:5]}",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }
