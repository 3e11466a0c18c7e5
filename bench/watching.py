"""What the benchmarks observe: first-seen times of Workload conditions and pool phases
(from two watches, so no poll interval blurs the figures), a bounded wait, and the
instances EC2 holds by tag.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch

from devenv import kueue_objects as ko
from provisioner.api import constants as c

KUEUE = (c.KUEUE_GROUP, c.KUEUE_VERSION)
GNP = (c.GROUP, c.VERSION, c.GNP_PLURAL)


@dataclass
class Timeline:
    """First-seen monotonic times of each Job's Workload conditions and each pool's phases,
    fed by two watches so no poll interval blurs them."""

    api: k8s.ApiClient
    namespace: str
    # The admission checks whose state is marked (`check<State>`): a Workload carries one.
    checks: tuple[str, ...] = (ko.CHECK_NAME,)
    workloads: dict[str, dict[str, float]] = field(default_factory=dict)
    pools: dict[str, dict[str, float]] = field(default_factory=dict)
    # Per Job, the name of its Workload (what a pool's claim names).
    workload_names: dict[str, str] = field(default_factory=dict)
    # Per pool, every phase change in order: a pool enters KeepWarm once per Workload.
    phase_changes: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        custom = k8s.CustomObjectsApi(self.api)
        lists: list[
            tuple[Callable[..., Any], tuple[Any, ...], Callable[[dict[str, Any]], None]]
        ] = [
            (
                custom.list_namespaced_custom_object,
                (*KUEUE, self.namespace, "workloads"),
                self._saw_workload,
            ),
            (custom.list_cluster_custom_object, GNP, self._saw_pool),
        ]
        for lister, args, handler in lists:
            threading.Thread(target=self._follow, args=(lister, args, handler), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _follow(
        self,
        lister: Callable[..., Any],
        args: tuple[Any, ...],
        handler: Callable[[dict[str, Any]], None],
    ) -> None:
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(lister, *args, timeout_seconds=60):
                    handler(event["object"])
                    if self._stop.is_set():
                        return
            except Exception:  # a dropped watch is re-opened; its list replays what was missed
                time.sleep(0.1)

    def _first(self, table_: dict[str, dict[str, float]], key: str, mark: str) -> None:
        now = time.monotonic()
        with self._lock:
            table_.setdefault(key, {}).setdefault(mark, now)

    def _saw_workload(self, wl: dict[str, Any]) -> None:
        owners = wl["metadata"].get("ownerReferences") or []
        job = next((o["name"] for o in owners if o.get("kind") == "Job"), None)
        if job is None:
            return
        with self._lock:
            self.workload_names[job] = wl["metadata"]["name"]
        status = wl.get("status") or {}
        for cond in status.get("conditions") or []:
            if cond.get("status") == "True":
                self._first(self.workloads, job, cond["type"])
        for check in status.get("admissionChecks") or []:
            if check.get("name") in self.checks:
                self._first(self.workloads, job, f"check{check.get('state')}")

    def _saw_pool(self, pool: dict[str, Any]) -> None:
        name = pool["metadata"]["name"]
        phase = (pool.get("status") or {}).get("phase")
        if phase:
            self._first(self.pools, name, phase)
            with self._lock:
                changes = self.phase_changes.setdefault(name, [])
                if not changes or changes[-1][1] != phase:
                    changes.append((time.monotonic(), phase))
        # When each kind of stack operation first finished, as the pool's status reports it
        # (a cold Job's prepare ends here, before its launch).
        status = pool.get("status") or {}
        operation, result = status.get("lastStackOperation"), status.get("lastStackResult")
        if operation and result:
            self._first(self.pools, name, f"stack:{operation}:{result}")
        # Per claim too, as a pool goes through its phases again for each Workload it serves
        # (the warm path: claimed, then Satisfied again without a launch).
        claim = (pool.get("spec") or {}).get("claim") or {}
        workload = claim.get("name")
        if workload:
            self._first(self.pools, name, f"claimed:{workload}")
            if phase:
                self._first(self.pools, name, f"{phase}:{workload}")

    def workload(self, job: str) -> dict[str, float]:
        with self._lock:
            return dict(self.workloads.get(job, {}))

    def pool(self, name: str) -> dict[str, float]:
        with self._lock:
            return dict(self.pools.get(name, {}))

    def workload_name(self, job: str) -> str:
        with self._lock:
            return self.workload_names.get(job, "")

    def entered(self, pool: str, phase: str, after: float) -> float | None:
        """When the pool first entered `phase` at or after `after` (monotonic), if it has."""
        with self._lock:
            changes = list(self.phase_changes.get(pool, ()))
        return next((t for t, p in changes if p == phase and t >= after), None)


# Conditions a watch saw in one event are marked within this of each other (`_first` reads
# the clock once per mark).
SAME_EVENT_SECONDS = 0.001


def ready_before_quota(marks: dict[str, float]) -> bool:
    """A Workload's check was seen Ready before its quota reserved."""
    return marks.get("checkReady", float("inf")) < marks.get("QuotaReserved", 0.0)


def admitted_with_reservation(marks: dict[str, float]) -> bool:
    """Kueue's reservation and Admitted came in one write (one watch event)."""
    admitted, quota = marks.get("Admitted"), marks.get("QuotaReserved")
    return admitted is not None and quota is not None and admitted - quota < SAME_EVENT_SECONDS


def wait_for(
    what: str, probe: Callable[[], Any], timeout: float, every: float, hint: str = ""
) -> Any:
    """`probe()`'s first truthy answer; a run that waits longer stops with what it waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := probe():
            return found
        time.sleep(every)
    raise SystemExit(f"gave up waiting for {what} after {timeout:.0f}s{hint}")


def instances_tagged(ec2: Any, key: str, value: str) -> list[dict[str, Any]]:
    """Every instance (any state) carrying tag `key`=`value`, over every DescribeInstances
    page (100 reservations each)."""
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:{key}", "Values": [value]}]
    )
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
