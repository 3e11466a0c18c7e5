"""The AdmissionCheck protocol's floor: a check whose controller says Ready the instant
Kueue has reserved quota, and does nothing else.

Kueue acts on a ClusterQueue's admission checks only once it has reserved quota (a check
that applies to every flavor is listed on the Workload, Pending, before), and admits only
once every check is Ready: a Workload behind any check costs Kueue two writes where a
plain queue costs one (quota reserved, then admitted), with the check's own write between
them. This controller is that write and nothing more (no claim, no pool, no precondition
on the version read), so a series behind it measures what any admission check costs under
Kueue, and what ours adds is judged against that rather than against Kueue alone.

With `before_quota` it says Ready as soon as Kueue lists the check on a Workload, before
any quota is reserved. Kueue 0.19 lists a ClusterQueue's checks on a Workload from its
first reconcile (the Workload controller syncs `status.admissionChecks` whether or not
quota is held) and keeps a state written then; its scheduler, reading the source, sets
Admitted with the reservation when every check is Ready already. A series behind such a
check measures what a check costs when its answer is known before quota: the most a warm
set could give a gang if it were claimed while the gang waits for quota (the product does
not do this). Whether Kueue then admits in one write is the series' to show: in this
machine's runs it did not (docs/FIGURES.md), and in a wave Kueue listed the check only
after the reservation. So with `own_queue` too it does not wait for the listing: on a
Workload of that LocalQueue that lists no entry of its yet, it adds its own, Ready
(preconditioned on the version it read; Kueue's sync keeps an entry it finds).

It marks its AdmissionCheck Active (Kueue holds a ClusterQueue whose checks are not) and
follows the bench's Workloads on a watch of its own, in the bench's process, as our
controller runs there too. Its writes go out on `WRITERS` threads, as many as our
Workload reconciler's workers: with one, a wave of 200 Workloads queued behind its own
writes, and the floor measured the bench's thread rather than the protocol.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from kubernetes import client as k8s
from kubernetes import watch

from provisioner.api import constants as c
from provisioner.controllers.manager import WORKLOAD_WORKERS

KUEUE = (c.KUEUE_GROUP, c.KUEUE_VERSION)
CONTROLLER_NAME: Final = "bench.atomic-gang.k8s.aws/instant"
WRITERS: Final = WORKLOAD_WORKERS


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class InstantCheck:
    """Sets check `name` Ready on every Workload of `namespace` holding quota (with
    `before_quota`, on every one that lists the check)."""

    api: k8s.ApiClient
    namespace: str
    name: str
    before_quota: bool = False
    # With `before_quota`: the LocalQueue whose Workloads get an entry of ours, Ready,
    # before Kueue lists the check on them.
    own_queue: str | None = None
    ready_written: int = 0
    entries_added: int = 0  # of the Ready writes, those that added our own entry
    refused: list[str] = field(default_factory=list)  # the apiserver's refusals, first 5
    _stop: threading.Event = field(default_factory=threading.Event)
    _writers: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(WRITERS, thread_name_prefix="instant-check")
    )
    # Workloads whose Ready write is under way: a watch event meanwhile adds none.
    _writing: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admission_check(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}",
            "kind": "AdmissionCheck",
            "metadata": {"name": self.name},
            "spec": {"controllerName": CONTROLLER_NAME},
        }

    def start(self) -> None:
        """Create the AdmissionCheck, mark it Active, and follow the Workloads."""
        custom = k8s.CustomObjectsApi(self.api)
        custom.create_cluster_custom_object(*KUEUE, "admissionchecks", self.admission_check())
        active = {
            "type": "Active",
            "status": "True",
            "reason": "Active",
            "message": "the bench's instant check",
            "lastTransitionTime": _now(),
        }
        custom.patch_cluster_custom_object_status(
            *KUEUE, "admissionchecks", self.name, {"status": {"conditions": [active]}}
        )
        threading.Thread(target=self._follow, name="instant-check", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._writers.shutdown(wait=True)

    def _follow(self) -> None:
        custom = k8s.CustomObjectsApi(self.api)
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(
                    custom.list_namespaced_custom_object,
                    *KUEUE,
                    self.namespace,
                    "workloads",
                    timeout_seconds=60,
                ):
                    if self._stop.is_set():
                        return
                    self._saw(custom, event["object"])
            except Exception:  # a dropped watch is re-opened; its list replays what was missed
                time.sleep(0.1)

    def _saw(self, custom: k8s.CustomObjectsApi, workload: dict[str, Any]) -> None:
        status = workload.get("status") or {}
        reserved = any(
            cond.get("type") == c.WL_QUOTA_RESERVED and cond.get("status") == "True"
            for cond in status.get("conditions") or []
        )
        checks = status.get("admissionChecks") or []
        index = next((i for i, s in enumerate(checks) if s.get("name") == self.name), None)
        if index is None and self._own_entry_for(workload, reserved):
            self._submit(workload["metadata"]["name"], self._add_entry, custom, workload)
            return
        if index is None or checks[index].get("state") != "Pending":
            return
        if not (reserved or self.before_quota):
            return
        self._submit(workload["metadata"]["name"], self._write_ready, custom, index)

    def _own_entry_for(self, workload: dict[str, Any], reserved: bool) -> bool:
        queue = (workload.get("spec") or {}).get("queueName")
        return self.before_quota and not reserved and queue is not None and queue == self.own_queue

    def _submit(
        self, name: str, write: Callable[..., None], custom: k8s.CustomObjectsApi, arg: Any
    ) -> None:
        with self._lock:
            if name in self._writing:
                return
            self._writing.add(name)
        self._writers.submit(self._write, name, write, custom, arg)

    def _write(
        self, name: str, write: Callable[..., None], custom: k8s.CustomObjectsApi, arg: Any
    ) -> None:
        try:
            write(custom, name, arg)
            with self._lock:
                self.ready_written += 1
                self.entries_added += write == self._add_entry
        except k8s.ApiException as err:
            # Moved on meanwhile (the watch brings the Workload again), or refused.
            with self._lock:
                if len(self.refused) < 5:
                    self.refused.append(f"{err.status} {err.reason}: {err.body}"[:300])
        finally:
            with self._lock:
                self._writing.discard(name)

    def _add_entry(self, custom: k8s.CustomObjectsApi, name: str, workload: dict[str, Any]) -> None:
        entry = {
            "name": self.name,
            "state": "Ready",
            "message": "the bench's instant check, before Kueue listed it",
            "lastTransitionTime": _now(),
        }
        version: dict[str, Any] = {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": workload["metadata"]["resourceVersion"],
        }
        add: dict[str, Any]
        status = workload.get("status")
        if status is None:
            add = {"op": "add", "path": "/status", "value": {"admissionChecks": [entry]}}
        elif status.get("admissionChecks") is None:
            add = {"op": "add", "path": "/status/admissionChecks", "value": [entry]}
        else:
            add = {"op": "add", "path": "/status/admissionChecks/-", "value": entry}
        custom.patch_namespaced_custom_object_status(
            *KUEUE,
            self.namespace,
            "workloads",
            name,
            [version, add],
            _content_type="application/json-patch+json",
        )

    def _write_ready(self, custom: k8s.CustomObjectsApi, name: str, index: int) -> None:
        base = f"/status/admissionChecks/{index}"
        operations = [
            # Guards the index against another writer's reordering; nothing else is checked.
            {"op": "test", "path": f"{base}/name", "value": self.name},
            {"op": "replace", "path": f"{base}/state", "value": "Ready"},
            {"op": "replace", "path": f"{base}/lastTransitionTime", "value": _now()},
        ]
        custom.patch_namespaced_custom_object_status(
            *KUEUE,
            self.namespace,
            "workloads",
            name,
            operations,
            _content_type="application/json-patch+json",
        )
