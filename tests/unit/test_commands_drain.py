"""`atomic-gang drain`: the pass plan, the wait loop with a fake world and clock, and the
real world's Kubernetes and EC2 reads over fakes."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.commands import cli
from provisioner.commands.doctor_kube import CLUSTER_QUEUES
from provisioner.commands.drain import (
    HOLD_AND_DRAIN,
    NO_STOP,
    ClusterDrain,
    Facts,
    PoolLeft,
    Step,
    drain,
    plan_pass,
    resume,
)
from provisioner.kube.resources import ResourceRef
from tests.support.fake_kube import FakeKube

pytestmark = pytest.mark.unit


def pool(name: str, *, deleting: bool = False, phase: str = "Satisfied") -> PoolLeft:
    return PoolLeft(name, phase, deleting, (c.FINALIZER,))


@pytest.mark.parametrize(
    ("facts", "step"),
    [
        (Facts(), Step(done=True, why="drained")),
        (
            Facts(admitted=("ml/train",), pools=(pool("a"),)),
            Step(why="waiting for Kueue to evict the admitted gangs"),
        ),
        (
            Facts(pools=(pool("a"), pool("b", deleting=True))),
            Step(delete=("a",), why="releasing"),
        ),
        (Facts(instances=("i-1",)), Step(why="releasing")),
        (Facts(stacks=("orphan",)), Step(why="releasing")),
    ],
)
def test_each_pass_deletes_only_pools_not_yet_deleted_and_only_once_no_gang_is_admitted(
    facts: Facts, step: Step
) -> None:
    assert plan_pass(facts) == step


@dataclass
class FakeClock:
    t: float = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class ReleasingWorld:
    """Kueue evicts the gang on the 2nd pass; a deleted pool releases over two passes, its
    instances and stack going with it; `stuck` pools never release; `reappears` is created
    again once after its first delete (a Workload reconciler that had not seen the
    eviction yet)."""

    pools: dict[str, int] = field(default_factory=dict)  # name -> instances
    stuck: set[str] = field(default_factory=set)
    reappears: set[str] = field(default_factory=set)
    admitted_passes: int = 1
    calls: list[str] = field(default_factory=list)
    deleting: dict[str, int] = field(default_factory=dict)  # name -> passes since delete

    def hold_queues(self, policy: str) -> list[str]:
        self.calls.append(f"hold {policy}")
        return ["gpu-cq"]

    def observe(self) -> Facts:
        self.calls.append("observe")
        for name in list(self.deleting):
            self.deleting[name] += 1
            if self.deleting[name] >= 2 and name not in self.stuck:
                del self.deleting[name], self.pools[name]
                if name in self.reappears:
                    self.reappears.discard(name)
                    self.pools[name] = 2
        admitted = ("ml/train",) if self.admitted_passes > 0 else ()
        self.admitted_passes -= 1
        return Facts(
            admitted=admitted,
            pools=tuple(pool(n, deleting=n in self.deleting) for n in sorted(self.pools)),
            instances=tuple(f"i-{n}-{k}" for n, count in self.pools.items() for k in range(count)),
            stacks=tuple(sorted(self.pools)),
        )

    def delete_pool(self, name: str) -> None:
        self.calls.append(f"delete {name}")
        self.deleting.setdefault(name, 0)


def test_drain_holds_the_queues_waits_for_eviction_then_releases_every_pool() -> None:
    world = ReleasingWorld(pools={"satisfied": 2, "warm": 1})
    lines: list[str] = []
    code = drain(world, timeout=60, poll=1, say=lines.append, clock=FakeClock())  # type: ignore[arg-type]
    assert code == 0
    deletes = [x for x in world.calls if x.startswith("delete")]
    assert deletes == ["delete satisfied", "delete warm"]
    # The queues are stopped first; nothing is deleted while a gang is still admitted.
    assert world.calls[:3] == [f"hold {HOLD_AND_DRAIN}", "observe", "observe"]
    assert "gpu-cq" in lines[0] and HOLD_AND_DRAIN in lines[0]
    assert any("1 gang(s) still admitted" in x for x in lines)
    assert any("3 instance(s) in EC2" in x for x in lines)
    assert lines[-1] == "drained: 0 instances in EC2, no stack, no GangNodePool left"


def test_a_pool_made_again_meanwhile_is_deleted_again() -> None:
    world = ReleasingWorld(pools={"p": 2}, reappears={"p"}, admitted_passes=0)
    assert drain(world, timeout=60, poll=1, say=lambda _: None, clock=FakeClock()) == 0  # type: ignore[arg-type]
    assert [x for x in world.calls if x.startswith("delete")] == ["delete p", "delete p"]


def test_on_timeout_it_exits_1_naming_each_pool_instance_and_stack_left() -> None:
    world = ReleasingWorld(pools={"stuck": 2}, stuck={"stuck"}, admitted_passes=0)
    lines: list[str] = []
    clock = FakeClock()
    code = drain(world, timeout=10, poll=1, say=lines.append, clock=clock)  # type: ignore[arg-type]
    assert code == 1
    assert clock.t == 10
    assert world.calls.count("delete stuck") == 1
    tail = "\n".join(lines[lines.index("timed out after 10s; left:") :])
    assert f"GangNodePool stuck: phase Satisfied, {c.FINALIZER}" in tail
    assert "i-stuck-0, i-stuck-1" in tail
    assert "stacks in the state backend: stuck" in tail


def test_kueue_not_evicting_is_named_on_timeout() -> None:
    world = ReleasingWorld(pools={"p": 1}, admitted_passes=10**6)
    lines: list[str] = []
    assert drain(world, timeout=3, poll=1, say=lines.append, clock=FakeClock()) == 1  # type: ignore[arg-type]
    assert not [x for x in world.calls if x.startswith("delete")]
    assert any("still admitted: ml/train" in x and "Kueue" in x for x in lines)


def test_resume_sets_the_stop_policy_back() -> None:
    world = ReleasingWorld()
    lines: list[str] = []
    assert resume(world, lines.append) == 0  # type: ignore[arg-type]
    assert world.calls == [f"hold {NO_STOP}"]
    assert "gpu-cq" in lines[0]


# -- the real world over fakes ---------------------------------------------------------------
class WritableKube(FakeKube):
    """`FakeKube` plus the two writes the drain makes, recorded and applied."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        super().__init__(*(copy.deepcopy(o) for o in objects))
        self.writes: list[tuple[str, str, Any]] = []

    def patch(
        self,
        ref: ResourceRef,
        name: str,
        patch: Mapping[str, Any],
        *,
        resource_version: str,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        obj = self.get(ref, name, namespace=namespace)
        assert obj["metadata"]["resourceVersion"] == resource_version
        obj["spec"].update(patch["spec"])
        self.writes.append(("patch", name, dict(patch)))
        return obj

    def delete(self, ref: ResourceRef, name: str, *, resource_version: str | None) -> None:
        self.get(ref, name)["metadata"]["deletionTimestamp"] = "now"
        self.writes.append(("delete", name, resource_version))


def obj(kind: str, name: str, spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"name": name, "resourceVersion": "7", **meta},
        "spec": spec or {},
    }


def strategy(*checks: str) -> dict[str, Any]:
    return {"admissionChecksStrategy": {"admissionChecks": [{"name": n} for n in checks]}}


def workload(name: str, check: str, reserved: str, finished: str = "False") -> dict[str, Any]:
    wl = obj("Workload", name, namespace="ml")
    wl["status"] = {
        "admissionChecks": [{"name": check, "state": "Ready"}],
        "conditions": [
            {"type": "QuotaReserved", "status": reserved},
            {"type": "Finished", "status": finished},
        ],
    }
    return wl


WORLD = (
    obj("AdmissionCheck", "gang-check", {"controllerName": c.CONTROLLER_NAME}),
    obj("AdmissionCheck", "other-check", {"controllerName": "example.com/other"}),
    obj("ClusterQueue", "gang-cq", strategy("gang-check")),
    obj("ClusterQueue", "mixed-cq", strategy("other-check", "gang-check")),
    obj("ClusterQueue", "other-cq", strategy("other-check")),
    obj("ClusterQueue", "plain-cq"),
    workload("ours-running", "gang-check", "True"),
    workload("ours-pending", "gang-check", "False"),
    workload("ours-finished", "gang-check", "True", finished="True"),
    workload("theirs-running", "other-check", "True"),
    obj("GangNodePool", "p", finalizers=[c.FINALIZER]),
)


@dataclass
class FakeEc2:
    ids: Sequence[str] = ()
    filters: list[Any] = field(default_factory=list)

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]:
        self.filters.append(kwargs["Filters"])
        return {"Reservations": [{"Instances": [{"InstanceId": i} for i in self.ids]}]}


@dataclass(frozen=True)
class Summary:
    name: str


@dataclass
class FakeStacks:
    names: Sequence[str] = ()

    def list_stacks(self) -> list[Summary]:
        return [Summary(n) for n in self.names]


def test_only_cluster_queues_listing_our_check_are_stopped_at_the_version_read() -> None:
    kube = WritableKube(*WORLD)
    world = ClusterDrain(kube, FakeEc2(), FakeStacks(), "prod")
    assert world.hold_queues(HOLD_AND_DRAIN) == ["gang-cq", "mixed-cq"]
    assert [w[:2] for w in kube.writes] == [("patch", "gang-cq"), ("patch", "mixed-cq")]
    assert kube.get(CLUSTER_QUEUES, "gang-cq")["spec"]["stopPolicy"] == HOLD_AND_DRAIN
    assert "stopPolicy" not in kube.get(CLUSTER_QUEUES, "other-cq")["spec"]


def test_the_checks_are_those_of_the_configured_controller_name() -> None:
    """settings.controllerName may be other than the default: its checks are ours."""
    custom = "example.com/our-renamed-controller"
    kube = WritableKube(
        obj("AdmissionCheck", "renamed-check", {"controllerName": custom}),
        obj("AdmissionCheck", "default-check", {"controllerName": c.CONTROLLER_NAME}),
        obj("ClusterQueue", "renamed-cq", strategy("renamed-check")),
        obj("ClusterQueue", "default-cq", strategy("default-check")),
        workload("renamed-running", "renamed-check", "True"),
    )
    world = ClusterDrain(kube, FakeEc2(), FakeStacks(), "prod", controller_name=custom)
    assert world.hold_queues(HOLD_AND_DRAIN) == ["renamed-cq"]
    assert world.observe().admitted == ("ml/renamed-running",)


def test_observe_counts_our_admitted_gangs_live_instances_of_the_cluster_and_stacks() -> None:
    ec2 = FakeEc2(ids=("i-1", "i-2"))
    world = ClusterDrain(WritableKube(*WORLD), ec2, FakeStacks(("p", "orphan")), "prod")
    facts = world.observe()
    assert facts.admitted == ("ml/ours-running",)
    assert facts.pools == (PoolLeft("p", "Idle", False, (c.FINALIZER,)),)
    assert facts.instances == ("i-1", "i-2")
    assert facts.stacks == ("orphan", "p")
    by_name = {f["Name"]: f["Values"] for f in ec2.filters[0]}
    assert by_name[f"tag:{c.TAG_CLUSTER}"] == ["prod"]
    assert set(by_name["instance-state-name"]) == {"pending", "running", "stopping", "stopped"}


def test_delete_marks_the_pool_for_its_finalizer() -> None:
    kube = WritableKube(*WORLD)
    world = ClusterDrain(kube, FakeEc2(), FakeStacks(), "prod")
    world.delete_pool("p")
    assert world.observe().pools[0].deleting
    assert kube.writes == [("delete", "p", None)]


def test_the_cli_hands_drain_its_flags() -> None:
    args, rest = cli.build_parser().parse_known_args(["drain", "--timeout", "5", "--resume"])
    assert args.handler is cli._drain
    assert rest == ["--timeout", "5", "--resume"]


def test_settings_flags_are_the_controllers_and_reading_the_stacks_writes_nothing(
    tmp_path: Any,
) -> None:
    import json

    from provisioner.commands.drain import _settings, build_parser
    from provisioner.commands.pools import stack_reader
    from provisioner.pulumi_driver.inventory import StackInventory

    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(
        json.dumps(
            {
                "clusterName": "prod",
                "defaults": {
                    "region": "us-east-1",
                    "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes",
                },
                "pulumi": {
                    "stateDir": str(tmp_path / "controller-state"),
                    "backendUrl": "s3://bucket?region=us-east-1",
                    "secretsProvider": "awskms://alias/k?region=us-east-1",
                },
            }
        )
    )
    args, rest = build_parser().parse_known_args(["--config", str(settings_file)])
    settings, source = _settings(args, rest)
    assert settings.cluster_name == "prod"
    assert source == "the settings flags"
    # The stacks are read from the bucket itself: no Pulumi CLI, no work files anywhere.
    reader = stack_reader(settings, local_state=True, pulumi_root=None, prefix="drain-")
    assert isinstance(reader, StackInventory)
    assert not (tmp_path / "controller-state").exists()
