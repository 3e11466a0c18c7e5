"""A pool's launch template and placement group are found by our tags, and deleted only when
the pool's stack proves them its own (their EC2 ids in its record): by the release of a pool
whose stack state is gone and by the reaper once the pool itself is gone. A tagged
look-alike the stack never recorded is reported and left alone."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.settings import Settings
from provisioner.cloud.leftovers import Leftover, split_proven
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.actions import PoolActions
from provisioner.controllers.pool.steps import Action, Step
from provisioner.controllers.reaper import PoolFacts, Reaper, stack_resource_ids
from provisioner.pulumi_driver.port import FailureKind, StackError
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_stacks import FakeStacks
from tests.support.pool_reconciler import pool_deps
from tests.support.pools import pool
from tests.unit.test_cloud_helpers import CLUSTER, REGION, World, emulated_aws

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def _tags(cluster: str, pool: str) -> list[dict[str, str]]:
    return [
        {"Key": c.TAG_MANAGED, "Value": "true"},
        {"Key": c.TAG_CLUSTER, "Value": cluster},
        {"Key": c.TAG_POOL, "Value": pool},
    ]


def _pool_infrastructure(
    world: World, pool: str, cluster: str = CLUSTER, name: str | None = None
) -> frozenset[str]:
    """A template and a group tagged as `pool`'s; their EC2 ids (what its stack records)."""
    name = name or f"atomic-gang-{cluster}-{pool}"
    template = world.ec2.create_launch_template(
        LaunchTemplateName=name,
        LaunchTemplateData={"InstanceType": "m5.large"},
        TagSpecifications=[{"ResourceType": "launch-template", "Tags": _tags(cluster, pool)}],
    )["LaunchTemplate"]
    group = world.ec2.create_placement_group(
        GroupName=name,
        Strategy="cluster",
        TagSpecifications=[{"ResourceType": "placement-group", "Tags": _tags(cluster, pool)}],
    )["PlacementGroup"]
    return frozenset({template["LaunchTemplateId"], group["GroupId"]})


def _names(world: World) -> set[str]:
    lts = world.ec2.describe_launch_templates()["LaunchTemplates"]
    pgs = world.ec2.describe_placement_groups()["PlacementGroups"]
    return {f"lt/{t['LaunchTemplateName']}" for t in lts} | {f"pg/{g['GroupName']}" for g in pgs}


def test_a_pools_leftovers_are_found_by_tag_and_deleted(world: World) -> None:
    _pool_infrastructure(world, "lost")
    _pool_infrastructure(world, "kept")
    _pool_infrastructure(world, "lost", cluster="another-cluster")
    world.ec2.create_launch_template(
        LaunchTemplateName="not-ours", LaunchTemplateData={"InstanceType": "m5.large"}
    )

    found = world.engine.leftovers(CLUSTER, "lost")

    assert sorted((o.kind, o.name, o.pool) for o in found) == [
        ("launch-template", f"atomic-gang-{CLUSTER}-lost", "lost"),
        ("placement-group", f"atomic-gang-{CLUSTER}-lost", "lost"),
    ]
    world.engine.delete_leftovers(found)
    assert world.engine.leftovers(CLUSTER, "lost") == []
    assert f"lt/atomic-gang-{CLUSTER}-kept" in _names(world)
    assert "lt/atomic-gang-another-cluster-lost" in _names(world)
    assert "lt/not-ours" in _names(world)
    # Deleting what is already gone is not a failure (a retried release).
    assert world.engine.delete_leftovers(found) == found


@pytest.mark.parametrize(
    ("recorded", "proven"),
    [
        (frozenset({"lt-1", "pg-1"}), ["lt-1", "pg-1"]),
        (frozenset({"lt-1"}), ["lt-1"]),
        # A name is no proof: a group of the same name made after ours went is not ours.
        (frozenset({"atomic-gang-c-p"}), []),
        (frozenset(), []),
    ],
)
def test_only_what_the_stack_recorded_by_id_is_proven(
    recorded: frozenset[str], proven: list[str]
) -> None:
    found = [
        Leftover("launch-template", "lt-1", "atomic-gang-c-p", "p"),
        Leftover("placement-group", "pg-1", "atomic-gang-c-p", "p"),
    ]
    ours, others = split_proven(found, recorded)
    assert [o.resource_id for o in ours] == proven
    assert [o.resource_id for o in others] == [
        o.resource_id for o in found if o.resource_id not in proven
    ]


def _reaper(
    world: World,
    facts: dict[str, Any] | Callable[[], dict[str, Any]],
    records: dict[str, frozenset[str]],
    metrics: ControllerMetrics | None = None,
) -> Reaper:
    return Reaper(
        world.engine,
        CLUSTER,
        facts if callable(facts) else lambda: facts,
        3.0,
        lambda: datetime.now(UTC),
        metrics or ControllerMetrics(),
        cache_problem=lambda: None,
        ownership_key=None,
        max_lifetime=timedelta(hours=168),
        stack_record=lambda name: records.get(name, frozenset()),
    )


def test_the_reaper_deletes_the_infrastructure_of_gone_pools_only(world: World) -> None:
    gone = _pool_infrastructure(world, "gone")
    alive = _pool_infrastructure(world, "alive")
    facts: dict[str, Any] = {"alive": PoolFacts(phase=Phase.IDLE, claimed=False)}

    report = _reaper(world, facts, {"gone": gone, "alive": alive}).sweep()

    assert sorted(report.infrastructure) == [
        f"launch-template/atomic-gang-{CLUSTER}-gone",
        f"placement-group/atomic-gang-{CLUSTER}-gone",
    ]
    assert report.foreign_infrastructure == ()
    assert world.engine.leftovers(CLUSTER, "gone") == []
    assert len(world.engine.leftovers(CLUSTER, "alive")) == 2


def test_the_reaper_reports_a_tagged_look_alike_its_stack_never_recorded(world: World) -> None:
    """Anyone who may tag can make another team's template look like a gone pool's, and
    the controller's IAM policy lets it delete anything carrying those tags. The reaper
    deletes only what the pool's stack recorded; a look-alike of a pool with a stack, and
    everything of a pool whose stack is lost, is reported and stays."""
    recorded = _pool_infrastructure(world, "gone")
    look_alike = _pool_infrastructure(world, "gone", name="team-b-template")
    _pool_infrastructure(world, "no-stack")
    metrics = ControllerMetrics()
    report = _reaper(world, {}, {"gone": recorded}, metrics).sweep()

    assert sorted(report.infrastructure) == [
        f"launch-template/atomic-gang-{CLUSTER}-gone",
        f"placement-group/atomic-gang-{CLUSTER}-gone",
    ]
    left = world.engine.leftovers(CLUSTER)
    assert {o.name for o in left} == {"team-b-template", f"atomic-gang-{CLUSTER}-no-stack"}
    assert len(report.foreign_infrastructure) == 4
    assert {i.split("/", 1)[1] for i in report.foreign_infrastructure} >= look_alike
    gauge = "atomic_gang_leftovers_unproven"
    for kind in ("launch-template", "placement-group"):
        assert metrics.registry.get_sample_value(gauge, {"kind": kind}) == 2


def test_a_pool_made_during_the_sweep_keeps_its_template(world: World) -> None:
    """The pool cache is read before the listing of templates: a pool created in between,
    whose stack has just made its template, is not gone. The pools are read again after
    EC2, as they are for instances."""
    made = _pool_infrastructure(world, "new")
    reads = iter([{}, {"new": PoolFacts(phase=Phase.ACQUIRING, claimed=True)}])

    report = _reaper(world, lambda: next(reads), {"new": made}).sweep()

    assert report.infrastructure == () and report.foreign_infrastructure == ()
    assert len(world.engine.leftovers(CLUSTER, "new")) == 2


def test_a_stack_that_cannot_be_read_proves_nothing() -> None:
    failing = FakeStacks(
        failing={"outputs": StackError("Boom", "unreadable", kind=FailureKind.RETRYABLE)}
    )
    assert stack_resource_ids(failing)("gone") == frozenset()
    assert stack_resource_ids(FakeStacks())("never-prepared") == frozenset()
    assert stack_resource_ids(FakeStacks(["kept"]))("kept") == frozenset(
        {"lt-0123456789abcdef0", "pg-0123456789abcdef0"}
    )


# --- the release of a pool whose stack is gone --------------------------------------------
class RecordingStacks(FakeStacks):
    """A stack that recorded `ids`, until its destroy."""

    def __init__(self, pool: str, ids: frozenset[str]) -> None:
        super().__init__([pool])
        self.ids = ids

    def outputs(self, pool: str) -> Any:
        held = super().outputs(pool)
        return None if held is None else SimpleNamespace(resource_ids=self.ids)


def _destroy(world: World, stacks: FakeStacks, name: str) -> None:
    settings = Settings.model_validate(
        {
            "cluster_name": CLUSTER,
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": REGION, "node_role_arn": world.role_arn},
        }
    )
    deps = pool_deps(settings=settings, engine=world.engine, stacks=stacks)
    released = GangNodePool.from_dict(pool(name, status={"phase": Phase.RELEASING}))
    result = PoolActions(deps).run(
        Step(Action.DESTROY_STACK, released.status), released, SimpleNamespace(), released
    )
    assert result is not None and result.ok, result


def test_a_release_deletes_what_the_stack_recorded_and_leaves_a_look_alike(
    world: World,
) -> None:
    """The stack's record is read before its destroy (the state may be gone from the
    backend while the controller still holds it): what it names goes even if the destroy
    left it; a template and group tagged as the pool's that it never recorded stay."""
    recorded = _pool_infrastructure(world, "lost")
    _pool_infrastructure(world, "lost", name="team-b-template")
    stacks = RecordingStacks("lost", recorded)

    _destroy(world, stacks, "lost")

    assert stacks.destroyed == ["lost"]
    assert {o.name for o in world.engine.leftovers(CLUSTER, "lost")} == {"team-b-template"}


def test_a_release_without_any_stack_record_deletes_nothing_it_found_by_tag(
    world: World,
) -> None:
    _pool_infrastructure(world, "lost")
    _destroy(world, FakeStacks(), "lost")
    assert len(world.engine.leftovers(CLUSTER, "lost")) == 2
