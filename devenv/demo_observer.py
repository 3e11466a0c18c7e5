"""The demo's names and its watcher: `Observer` polls the Jobs, Workloads, pools and EC2
instances of the scenario `demo` runs, prints each change, and totals the bill.

Split out of `demo` as it was (whole definitions moved, nothing changed), so each reads in
one sitting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

from devenv import kueue_objects as ko
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from provisioner.cloud.billing import Bill, bill, instance_life
from provisioner.cloud.block_bill import BoughtBlock

NAMESPACE = "default"
SHARED_POOL = "shared"
SCARCE_POOL = "scarce"
COMMON_TYPE = "m5.large"
SCARCE_TYPE = "c5.xlarge"
GANG = 2
GPU_TYPE = "p5.48xlarge"
GPU_LIMITS = {c.RESOURCE_GPU: "8", c.RESOURCE_EFA: "32"}
KUEUE = (c.KUEUE_GROUP, c.KUEUE_VERSION)
GNP = (c.GROUP, c.VERSION, c.GNP_PLURAL)


class DemoFailed(RuntimeError):
    pass


@dataclass
class JobRecord:
    name: str
    pool: str
    submitted: float
    ready_at: float | None = None
    done_at: float | None = None
    launched: set[str] = field(default_factory=set)
    kind: str = "Job"  # or "JobSet": what the user submitted and the Workload is owned by


JOBSETS = ("jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets")
# The condition each kind reports when it has finished well.
_DONE_CONDITION = {"Job": "Complete", "JobSet": "Completed"}


@dataclass
class Instance:
    pool: str
    first_seen: float
    gone: bool = False
    owner: str | None = None


class Observer:
    """Samples Jobs, Workloads, pools and instances; prints what changed; keeps the bill."""

    def __init__(self, env: LocalEnvironment, started: float) -> None:
        assert env.control_plane is not None
        api = env.control_plane.api_client()
        self.batch = k8s.BatchV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.ec2 = env.ec2_client()
        # EC2's clock, which a scene may move ahead (`advance_clock`): the bill reads it.
        self.ec2_now = env.emulator_client.now
        self.cluster = env.cluster_name
        self.started = started
        self.jobs: dict[str, JobRecord] = {}
        self.instances: dict[str, Instance] = {}
        self._last_line: dict[str, str] = {}
        # The Capacity Blocks bought for pools, by pool, kept from `status.blockPurchase`
        # before the pool is released: the bill's upfront fees.
        self.blocks: dict[str, BoughtBlock] = {}

    # -- sampling --------------------------------------------------------------------------
    def sample(self) -> None:
        now = time.monotonic()
        pools = {
            p["metadata"]["name"]: p for p in self.custom.list_cluster_custom_object(*GNP)["items"]
        }
        live = self.live_instances()
        for iid, pool in live.items():
            self.instances.setdefault(iid, Instance(pool, now))
        for iid, inst in self.instances.items():
            if iid not in live:
                inst.gone = True
        workloads = self.custom.list_namespaced_custom_object(*KUEUE, NAMESPACE, "workloads")[
            "items"
        ]
        for record in self.jobs.values():
            self._observe_job(record, now, pools, workloads, live)

    def _observe_job(
        self,
        record: JobRecord,
        now: float,
        pools: dict[str, Any],
        workloads: list[dict[str, Any]],
        live: dict[str, str],
    ) -> None:
        suspended, done = self._job_state(record)
        if not suspended and record.ready_at is None:
            record.ready_at = now
        if done and record.done_at is None:
            record.done_at = now
        for iid, pool in live.items():
            inst = self.instances[iid]
            # An instance belongs to the Job whose pool it joined after that Job was queued.
            if pool == record.pool and inst.owner is None and inst.first_seen >= record.submitted:
                inst.owner = record.name
                record.launched.add(iid)
        wl = next(
            (
                w
                for w in workloads
                if any(
                    o.get("name") == record.name and o.get("kind") == record.kind
                    for o in w["metadata"].get("ownerReferences") or []
                )
            ),
            None,
        )
        status = (pools.get(record.pool) or {}).get("status") or {}
        state = "Complete" if done else ("Running" if not suspended else "Suspended")
        line = (
            f"{record.kind.lower()} {record.name:<13} {state:<9} check={_check(wl):<8} "
            f"pool {record.pool}: {status.get('phase', '-'):<9} "
            f"instances={len(status.get('instanceIds') or [])} ready={status.get('readyNodes', 0)} "
            f"shortfalls={status.get('consecutiveShortfalls', 0)} "
            f"running-in-ec2={sum(1 for p in live.values() if p == record.pool)}"
        )
        if self._last_line.get(record.name) != line:
            self._last_line[record.name] = line
            print(f"[{now - self.started:6.1f}s] {line}", flush=True)

    def _job_state(self, record: JobRecord) -> tuple[bool, bool]:
        """(suspended, finished well) of what the user submitted, read as its kind."""
        if record.kind == "Job":
            body = self.batch.read_namespaced_job(record.name, NAMESPACE).to_dict()
        else:
            body = self.custom.get_namespaced_custom_object(*JOBSETS, record.name)
        conditions = (body.get("status") or {}).get("conditions") or []
        done = any(
            x.get("type") == _DONE_CONDITION[record.kind] and x.get("status") == "True"
            for x in conditions
        )
        return bool((body.get("spec") or {}).get("suspend")), done

    def live_instances(self) -> dict[str, str]:
        pages = self.ec2.describe_instances(
            Filters=[
                {"Name": f"tag:{c.TAG_CLUSTER}", "Values": [self.cluster]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )["Reservations"]
        return {
            i["InstanceId"]: next(
                (t["Value"] for t in i.get("Tags", []) if t["Key"] == c.TAG_POOL), ""
            )
            for r in pages
            for i in r["Instances"]
        }

    def wait(self, what: str, probe: Callable[[], bool], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sample()
            if probe():
                return
            time.sleep(0.5)
        raise DemoFailed(f"timed out after {timeout:.0f}s waiting for {what}")

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {message}", flush=True)

    # -- queries ---------------------------------------------------------------------------
    def pool_status(self, name: str) -> dict[str, Any]:
        try:
            return dict(self.custom.get_cluster_custom_object(*GNP, name).get("status") or {})
        except k8s.ApiException as err:
            if err.status == 404:
                return {}
            raise

    def live_in(self, pool: str) -> int:
        return sum(1 for p in self.live_instances().values() if p == pool)

    def workload_check(self, job: str) -> str:
        for wl in self.custom.list_namespaced_custom_object(*KUEUE, NAMESPACE, "workloads")[
            "items"
        ]:
            if any(o.get("name") == job for o in wl["metadata"].get("ownerReferences") or []):
                return _check(wl)
        return "-"

    # -- the bill --------------------------------------------------------------------------
    def pool_bills(self) -> dict[str, Bill]:
        """Billed and stranded node-seconds per pool, from EC2's history of every managed
        instance of the cluster (terminated and rolled-back ones included)."""
        raw: list[dict[str, Any]] = []
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": f"tag:{c.TAG_CLUSTER}", "Values": [self.cluster]}]
        )
        for page in pages:
            raw.extend(i for r in page["Reservations"] for i in r["Instances"])
        pool_of = {i["InstanceId"]: _tag(i, c.TAG_POOL) or "" for i in raw}
        lives = {life.instance_id: life for life in map(instance_life, raw)}
        now = datetime.fromtimestamp(self.ec2_now(), UTC)
        per_pool: dict[str, Bill] = {}
        for iid, one in bill(lives.values(), lambda _: GANG, now).items():
            per_pool[pool_of[iid]] = per_pool.get(pool_of[iid], Bill(0.0, 0.0)) + one
            if one.stranded > 0:
                # A non-zero total must say which instance and when, or a failed run
                # cannot be read afterwards.
                life = lives[iid]
                print(
                    f"stranded: {iid} pool {life.pool} group {life.group} launched "
                    f"{life.launched:%H:%M:%S} ended {life.ended or 'no'}: {one.stranded:.1f} "
                    f"of {one.billed:.1f} node-s",
                    flush=True,
                )
        return per_pool


def _tag(instance: dict[str, Any], key: str) -> str | None:
    return next((t["Value"] for t in instance.get("Tags", []) if t["Key"] == key), None)


def _check(wl: dict[str, Any] | None) -> str:
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks", []):
        if entry["name"] == ko.CHECK_NAME:
            return str(entry["state"])
    return "-"


def _job(name: str, pool: str, instance_type: str) -> dict[str, Any]:
    return ko.gang_job(
        NAMESPACE, name, ko.QUEUE_NAME, pool, GANG, {c.ANN_INSTANCE_TYPE: instance_type}
    )
