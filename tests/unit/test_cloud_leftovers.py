"""A pool's launch template and placement group are found and removed by our tags alone, by
the release of a pool whose stack is gone and by the reaper once the pool itself is gone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.reaper import PoolFacts, Reaper
from tests.unit.test_cloud_helpers import CLUSTER, World, emulated_aws

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


def _pool_infrastructure(world: World, pool: str, cluster: str = CLUSTER) -> None:
    world.ec2.create_launch_template(
        LaunchTemplateName=f"atomic-gang-{cluster}-{pool}",
        LaunchTemplateData={"InstanceType": "m5.large"},
        TagSpecifications=[{"ResourceType": "launch-template", "Tags": _tags(cluster, pool)}],
    )
    world.ec2.create_placement_group(
        GroupName=f"atomic-gang-{cluster}-{pool}",
        Strategy="cluster",
        TagSpecifications=[{"ResourceType": "placement-group", "Tags": _tags(cluster, pool)}],
    )


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


def test_the_reaper_deletes_the_infrastructure_of_gone_pools_only(world: World) -> None:
    _pool_infrastructure(world, "gone")
    _pool_infrastructure(world, "alive")
    facts: dict[str, Any] = {"alive": PoolFacts(phase=Phase.IDLE, claimed=False)}
    reaper = Reaper(
        world.engine,
        CLUSTER,
        lambda: facts,
        3.0,
        lambda: datetime.now(UTC),
        ControllerMetrics(),
        cache_problem=lambda: None,
        ownership_key=None,
        max_lifetime=timedelta(hours=168),
    )

    report = reaper.sweep()

    assert sorted(report.infrastructure) == [
        f"launch-template/atomic-gang-{CLUSTER}-gone",
        f"placement-group/atomic-gang-{CLUSTER}-gone",
    ]
    assert world.engine.leftovers(CLUSTER, "gone") == []
    assert len(world.engine.leftovers(CLUSTER, "alive")) == 2
