"""AWS calls per pass of the pool reconciler, as the EC2 emulator counts them.

    .venv/bin/python -m bench.bench_launch_reads [--shapes plain,gpu-odcr,...] [--json F]
        [--record]
    (make bench-launch-reads; part of make bench)

Shapes: `plain` (4 x m5.large, RunInstances), `gpu-odcr` (2 x p5.48xlarge, EFA, a cluster
placement group, on an On-Demand Capacity Reservation in one zone), and both in fleet mode
(`fleet`, `gpu-odcr-fleet`).

Starts the EC2 emulator as its own process; its `/_emulator/requests` accounting names the
access key that signed each call, and the engine signs with a key of its own, so only the
controller's calls are counted. For each shape, one pool goes through its life on the real
`GangNodePoolReconciler` and `Ec2Engine`, one pass at a time, and three of its passes are
counted, by AWS call:
1. prepare: the pass that plans the stack's preparation, the operation itself (the stack
   executor's, run on this thread) and the pass that saves its result;
2. launch: the one pass that finds the stack prepared from today's inputs, marks the
   launch and launches the gang;
3. warm claim: the pass that hands a warm set (Ready nodes, keep-warm) to a new claim.
Between them, uncounted: the set's nodes join and the set is recorded, its claim is
dropped and it goes warm.

The pool object lives in a small in-memory stand-in of the apiserver and its informer
cache, the Nodes are written by the bench, and the stack is a stand-in that creates the
launch template and placement group the Pulumi program would, signed with a key of its own
(Pulumi's calls are not the subject). The instance index runs on a clock that does not
move: every pass is within its refresh interval, as a pool's passes a moment apart are.
Figures, not assertions; but a pass that does not end where the life cycle says it must
stops the run, rather than print the calls of some other pass. Each run prints its reads,
repeated reads and writes per shape and pass beside `bench/baselines/bench_launch_reads.json`
(`--record` keeps the run's).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import boto3  # type: ignore[import-untyped]

from bench import baselines
from bench.stats import table
from devenv.bootstrap import register_cluster_and_identity
from devenv.controlplane import ControlPlaneInfo
from devenv.emulator import EmulatorClient, EmulatorProcess
from devenv.pki import CertificateAuthority
from provisioner.api import constants as c
from provisioner.api.clock import FakeClock, SystemClock
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.nodes import Node
from provisioner.api.settings import Settings
from provisioner.cloud import Ec2Engine
from provisioner.cloud.ec2api import build_clients
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.launch_budget import LaunchBudget
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.deps import PoolReconcilerDeps
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.kube.cache import TypedCache
from provisioner.kube.resources import ObjectKey
from provisioner.pulumi_driver.port import PreparedStack
from stacks.launch_template import launch_template_request
from stacks.outputs import PoolOutputs
from stacks.placement_group import placement_group_request
from stacks.spec import InstanceSetRecord, PoolSpec

REGION: Final = "us-east-1"
CLUSTER: Final = "bench-reads"
ROLE_NAME: Final = "bench-gang-node"
# Each client signs with its own access key; the emulator counts calls by key.
CONTROLLER_KEY: Final = "bench-controller"
STACK_KEY: Final = "bench-stack"
RESERVED_ZONE: Final = "us-east-1b"
PASSES: Final = ("launch", "prepare", "warm claim")
# Enough passes for the nodes to join and the set to be recorded, with room to spare.
SETTLING_PASSES: Final = 10


@dataclass(frozen=True)
class Shape:
    """A pool's spec fields, and the ODCR it targets (created on the emulator) if any."""

    spec: Mapping[str, Any]
    reserved_type: str | None = None


SHAPES: Final = {
    "plain": Shape({"count": 4, "instanceType": "m5.large", "mode": "runinstances"}),
    "gpu-odcr": Shape(
        {
            "count": 2,
            "instanceType": "p5.48xlarge",
            "mode": "runinstances",
            "amiVariant": "nvidia",
            "efa": True,
            "placementGroup": "cluster",
            "availabilityZones": [RESERVED_ZONE],
        },
        reserved_type="p5.48xlarge",
    ),
    "fleet": Shape({"count": 4, "instanceType": "m5.large", "mode": "fleet"}),
    "gpu-odcr-fleet": Shape(
        {
            "count": 2,
            "instanceType": "p5.48xlarge",
            "mode": "fleet",
            "amiVariant": "nvidia",
            "efa": True,
            "placementGroup": "cluster",
            "availabilityZones": [RESERVED_ZONE],
        },
        reserved_type="p5.48xlarge",
    ),
}


# --- stand-ins for the apiserver, the Nodes, the events and the stack ------------------------
class PoolStore:
    """The pool object as the apiserver and the informer cache both hold it."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = copy.deepcopy(dict(obj))

    def get(self, _namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.obj) if name == self.obj["metadata"]["name"] else None

    def list(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.obj)]

    def add_handlers(self, **_: Any) -> None:
        """The bench changes the pool by hand: no events to deliver."""

    def patch_status(self, _ref: Any, _name: str, patch: Mapping[str, Any], **_: Any) -> Any:
        """A merge patch of the status (RFC 7386), as the apiserver applies one."""
        self.obj["status"] = _merged(self.obj.get("status") or {}, patch["status"])
        self._bump()
        return copy.deepcopy(self.obj)

    def set_claim(self, claim: Mapping[str, Any] | None) -> None:
        """A Workload claims the pool (or lets it go): a spec change, a new version."""
        self.obj["spec"].pop("claim", None)
        if claim is not None:
            self.obj["spec"]["claim"] = dict(claim)
        self._bump()

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.obj.get("status") or {})

    def _bump(self) -> None:
        meta = self.obj["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)


# Spelled once here: the stand-ins' `list` methods shadow `list` inside their classes.
Bodies = list[dict[str, Any]]


def _merged(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(target))
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


class Nodes:
    """The Node informer: the set's nodes, Ready and labelled as they join."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []

    def join(self, pool: str, group: str, instance_ids: Sequence[str]) -> None:
        self.nodes = [
            {
                "metadata": {
                    "name": f"node-{iid}",
                    "resourceVersion": "1",
                    "labels": {c.POOL_LABEL: pool, c.GROUP_LABEL: group},
                },
                "spec": {"providerID": f"aws:///{REGION}a/{iid}"},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
            for iid in instance_ids
        ]

    def get(self, _namespace: str, name: str) -> dict[str, Any] | None:
        return next((copy.deepcopy(n) for n in self.nodes if n["metadata"]["name"] == name), None)

    def list(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.nodes)

    def list_indexed(self, pool: str) -> Bodies:
        return [
            copy.deepcopy(n) for n in self.nodes if n["metadata"]["labels"][c.POOL_LABEL] == pool
        ]

    def add_handlers(self, **_: Any) -> None:
        """The bench joins the nodes by hand: no events to deliver."""


class Events:
    def record(self, _obj: Any, _type: str, _reason: str, _message: str) -> None:
        pass


class StandInStacks:
    """The pool's stack without Pulumi: `prepare` creates the placement group and the
    launch template the pool program declares, from the stack's own request builders."""

    def __init__(self, ec2: Any, profile_arn: str) -> None:
        self._ec2 = ec2
        self._profile_arn = profile_arn
        self._outputs: dict[str, PoolOutputs] = {}

    def is_prepared(self, pool: str) -> bool:
        return pool in self._outputs

    def outputs(self, pool: str) -> PoolOutputs | None:
        return self._outputs.get(pool)

    def holds(self, pool: str) -> bool:
        return pool in self._outputs  # its prepare makes all or raises before it records

    def prepare(self, spec: PoolSpec, *, refresh_first: bool = False) -> PreparedStack:
        group = spec.placement_group_name
        if group:
            self._ec2.create_placement_group(
                **placement_group_request({"name": group, "tags": dict(spec.tags)})
            )
        props = {
            "name": spec.launch_template_name,
            "image_id": spec.image_id,
            "instance_type": spec.instance_type,
            "user_data": spec.user_data,
            "instance_profile_arn": self._profile_arn,
            "security_group_ids": sorted(spec.security_group_ids),
            "efa_network_cards": list(spec.efa_network_cards),
            "placement_group_name": group or "",
            "capacity_reservation_id": spec.capacity_reservation_id,
            "capacity_reservation_kind": spec.capacity_reservation_kind,
            "tags": dict(spec.tags),
        }
        made = self._ec2.create_launch_template(**launch_template_request(props))
        template = made["LaunchTemplate"]
        outputs = PoolOutputs(
            pool=spec.pool,
            cluster=spec.cluster,
            spec=spec,
            launch_template_id=template["LaunchTemplateId"],
            launch_template_name=spec.launch_template_name,
            launch_template_version=str(template["LatestVersionNumber"]),
            instance_profile_arn=self._profile_arn,
            placement_group_name=group,
            record=None,
        )
        self._outputs[spec.pool] = outputs
        return PreparedStack(outputs)

    def record_instance_set(self, pool: str, group: str, instance_ids: Sequence[str]) -> None:
        record = InstanceSetRecord(group, tuple(instance_ids))
        self._outputs[pool] = replace(self._outputs[pool], record=record)

    def remove_instance_set(self, pool: str) -> None:
        raise NotImplementedError("the bench never releases a set")

    def destroy(self, pool: str) -> None:
        raise NotImplementedError("the bench never deletes a pool")

    def recover(self) -> None:
        pass

    def step_down(self) -> None:
        pass


# --- the reconciler under test --------------------------------------------------------------
@dataclass
class World:
    """One pool's reconciler and everything it reads and writes."""

    store: PoolStore
    nodes: Nodes
    executor: StackExecutor
    reconciler: GangNodePoolReconciler


def build_reconciler(
    store: PoolStore,
    nodes: Nodes,
    engine: Ec2Engine,
    stacks: StandInStacks,
    executor: StackExecutor,
    settings: Settings,
    metrics: ControllerMetrics,
) -> GangNodePoolReconciler:
    """The reconciler as the composition root builds it, on the bench's stand-ins; the one
    place that knows its constructor."""
    # A clock that does not move: the passes, a moment apart, share the index's listing.
    refresh = settings.instance_index_refresh.total_seconds()
    index = InstanceIndex(engine, settings.cluster_name, refresh, FakeClock(), metrics)
    deps = PoolReconcilerDeps(
        kube=store,  # type: ignore[arg-type]
        pools=TypedCache(store, GangNodePool.from_dict),  # type: ignore[arg-type]
        nodes=TypedCache(nodes, Node.from_dict),  # type: ignore[arg-type]
        engine=engine,
        index=index,
        stacks=stacks,
        executor=executor,
        settings=settings,
        recorder=Events(),  # type: ignore[arg-type]
        now=lambda: datetime.now(UTC),
        metrics=metrics,
        ownership_key=None,
        budget=LaunchBudget(settings.launch_budget),
        tag_budget=LaunchBudget(settings.launch_budget),
    )
    return GangNodePoolReconciler(deps)


# --- counting --------------------------------------------------------------------------------
class ControllerCalls:
    """The controller's AWS calls by name, from the emulator's accounting."""

    def __init__(self, emulator: EmulatorClient) -> None:
        self._emulator = emulator

    def total(self) -> Counter[str]:
        costs = self._emulator.request_costs()
        calls: Counter[str] = Counter()
        for name, row in costs.items():
            calls[action_of(name)] += row["clients"].get(CONTROLLER_KEY, 0)
        return +calls

    def during(self, body: Callable[[], None]) -> Counter[str]:
        before = self.total()
        body()
        return self.total() - before


def action_of(call: str) -> str:
    """The emulator's name of a call, with EKS's REST DescribeCluster named as the API is."""
    service, _, action = call.partition(":")
    path = action.removeprefix("GET /clusters/")
    if service == "eks" and path != action and "/" not in path:
        return "eks:DescribeCluster"
    return call


def is_read(call: str) -> bool:
    action = call.split(":", 1)[-1]
    return action.startswith(("Describe", "Get", "List", "GET "))


# --- one pool's life -------------------------------------------------------------------------
def claim_now() -> dict[str, Any]:
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"namespace": "bench", "name": "wl", "uid": "wl-uid", "claimedAt": at}


def pool_object(name: str, role_arn: str, shape: Shape, reservation: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "pool": name,
        "region": REGION,
        "nodeRoleArn": role_arn,
        "keepWarmTTL": "10m",
        "maxLifetime": "4h",
        "amiVariant": "standard",
        **shape.spec,
        "claim": claim_now(),
    }
    if reservation:
        spec["capacityReservationId"] = reservation
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.GNP_KIND,
        "metadata": {
            "name": name,
            "uid": f"{name}-uid",
            "resourceVersion": "1",
            "finalizers": [c.FINALIZER],
        },
        "spec": spec,
    }


def one_pass(world: World) -> None:
    world.reconciler.reconcile(ObjectKey("", world.store.obj["metadata"]["name"]))


def expect(world: World, what: str, holds: Callable[[dict[str, Any]], bool]) -> None:
    status = world.store.status
    if not holds(status):
        raise SystemExit(f"the pool is not {what} where the life cycle says: {status}")


def prepare(world: World) -> None:
    one_pass(world)  # plans the preparation and hands it to the executor
    if not world.executor.run_next(timeout=0):
        raise SystemExit(f"no stack operation submitted: {world.store.status}")
    one_pass(world)  # saves its result


def life(world: World, calls: ControllerCalls) -> dict[str, Counter[str]]:
    """Run the pool from its claim to a warm set claimed again; the counted passes' calls."""
    name = world.store.obj["metadata"]["name"]
    counted: dict[str, Counter[str]] = {}
    one_pass(world)
    expect(world, "Acquiring", lambda s: s.get("phase") == Phase.ACQUIRING)

    counted["prepare"] = calls.during(lambda: prepare(world))
    expect(world, "prepared", lambda s: s.get("lastStackOperation") == "prepare")

    counted["launch"] = calls.during(lambda: one_pass(world))
    expect(world, "launched", lambda s: bool(s.get("instanceIds")))

    status = world.store.status
    world.nodes.join(name, status["activeGroup"], status["instanceIds"])
    group = status["activeGroup"]
    for _ in range(SETTLING_PASSES):
        one_pass(world)
        world.executor.run_next(timeout=0)
        if world.store.status.get("recordedGroup") == group:
            break
    one_pass(world)
    expect(
        world,
        "Satisfied and recorded",
        lambda s: s.get("phase") == Phase.SATISFIED and s.get("recordedGroup") == group,
    )

    world.store.set_claim(None)
    one_pass(world)
    expect(world, "KeepWarm", lambda s: s.get("phase") == Phase.KEEP_WARM)

    world.store.set_claim(claim_now())
    counted["warm claim"] = calls.during(lambda: one_pass(world))
    expect(world, "Satisfied by the warm set", lambda s: s.get("phase") == Phase.SATISFIED)
    return counted


# --- the emulator and the run ----------------------------------------------------------------
def _client(service: str, endpoint: str, key: str) -> Any:
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=key,
    )


def run(shapes: Sequence[str], work: Path) -> dict[str, dict[str, Counter[str]]]:
    with EmulatorProcess(work / "emulator") as emulator:
        endpoint = emulator.endpoint_url
        # The cluster record's endpoint and CA only go into user data; no node joins for real.
        ca = CertificateAuthority("bench-launch-reads").cert_pem
        plane = ControlPlaneInfo("https://127.0.0.1:6443", work / "kubeconfig", ca, work)
        identity = register_cluster_and_identity(endpoint, plane, CLUSTER, REGION, ROLE_NAME)
        profile = _client("iam", endpoint, STACK_KEY).get_instance_profile(
            InstanceProfileName=identity.instance_profile
        )
        stacks = StandInStacks(
            _client("ec2", endpoint, STACK_KEY), profile["InstanceProfile"]["Arn"]
        )
        settings = Settings.model_validate(
            {
                "clusterName": CLUSTER,
                "defaults": {"region": REGION, "nodeRoleArn": identity.role_arn},
                "leaderElection": {"enabled": False},
                # Named because the settings require a backend; the stand-in never opens it.
                "pulumi": {"backendUrl": f"s3://atomic-gang-state?region={REGION}"},
                "aws": {"endpointUrl": endpoint},
            }
        )
        session = boto3.Session(
            aws_access_key_id=CONTROLLER_KEY, aws_secret_access_key=CONTROLLER_KEY
        )
        engine = Ec2Engine(build_clients(session, REGION, endpoint, max_attempts=1), SystemClock())
        calls = ControllerCalls(emulator.client)
        counted: dict[str, dict[str, Counter[str]]] = {}
        for shape_name in shapes:
            shape = SHAPES[shape_name]
            reservation = None
            if shape.reserved_type:
                count = int(shape.spec["count"])
                reservation = emulator.client.add_capacity_reservation(
                    shape.reserved_type, RESERVED_ZONE, count
                )
            pool = f"reads-{shape_name}"
            store = PoolStore(pool_object(pool, identity.role_arn, shape, reservation))
            metrics = ControllerMetrics()
            nodes = Nodes()
            executor = StackExecutor(1, on_finished=lambda _pool: None, metrics=metrics)
            reconciler = build_reconciler(store, nodes, engine, stacks, executor, settings, metrics)
            counted[shape_name] = life(World(store, nodes, executor, reconciler), calls)
    return counted


@dataclass(frozen=True)
class PassTotals:
    reads: int
    again: int  # reads of an action the pass had already made
    writes: int


def pass_totals(calls: Counter[str]) -> PassTotals:
    """One pass's AWS calls totalled: reads, repeated reads, writes."""
    reads = [n for call, n in calls.items() if is_read(call)]
    return PassTotals(
        reads=sum(reads),
        again=sum(n - 1 for n in reads if n > 1),
        writes=sum(n for call, n in calls.items() if not is_read(call)),
    )


def report(counted: Mapping[str, Mapping[str, Counter[str]]]) -> str:
    shapes = list(counted)
    out: list[str] = []
    for kind in PASSES:
        per_shape = [counted[s][kind] for s in shapes]
        names = sorted({n for calls in per_shape for n in calls}, key=lambda n: (not is_read(n), n))
        rows = [[name, *(str(calls[name] or "") for calls in per_shape)] for name in names]
        totals = [pass_totals(calls) for calls in per_shape]
        rows += [
            ["reads", *(str(t.reads) for t in totals)],
            ["  of which an action already read in this pass", *(str(t.again) for t in totals)],
            ["writes", *(str(t.writes) for t in totals)],
        ]
        out += [f"\n{kind} pass: the controller's AWS calls", table(("call", *shapes), rows)]
    return "\n".join(out)


def key_figures(counted: Mapping[str, Mapping[str, Counter[str]]]) -> dict[str, float]:
    """The figures a run is compared on: per shape and pass, `report`'s totals."""
    figures: dict[str, float] = {}
    for shape, passes in counted.items():
        for kind, calls in passes.items():
            totals = pass_totals(calls)
            figures[f"{shape} {kind} pass: reads"] = totals.reads
            figures[f"{shape} {kind} pass: reads again"] = totals.again
            figures[f"{shape} {kind} pass: writes"] = totals.writes
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"comma-separated, of {', '.join(SHAPES)}",
    )
    parser.add_argument("--json", type=Path, help="also write the counts here")
    parser.add_argument(
        "--record", action="store_true", help="keep this run's figures as the bench's baseline"
    )
    args = parser.parse_args(argv)
    ran_on = baselines.commit()  # what the figures measure, whatever is committed meanwhile
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shapes {unknown}; choose from {', '.join(SHAPES)}")
    with tempfile.TemporaryDirectory(prefix="bench-launch-reads-") as tmp:
        counted = run(shapes, Path(tmp))
    print("AWS calls per pass of the GangNodePool reconciler, counted by the EC2 emulator")
    print("(the controller's access key only; the stack stand-in's and the set-up's apart).")
    print(report(counted))
    figures = key_figures(counted)
    baselines.compare_and_record(
        "bench_launch_reads", figures, record_run=args.record, ran_on=ran_on
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {s: {k: dict(v) for k, v in p.items()} for s, p in counted.items()}, indent=2
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
