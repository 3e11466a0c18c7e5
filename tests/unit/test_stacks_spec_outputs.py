"""Pool specs, gang records, derived names, and reading a stack's outputs back (pure)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShape
from stacks import outputs as keys
from stacks.outputs import OutputsError, PoolOutputs
from stacks.spec import (
    InstanceSetRecord,
    PoolLookups,
    PoolSpec,
    launch_template_name,
    placement_group_name,
    pool_spec_for,
)
from tests.support.backends import UNREACHED_BACKEND

pytestmark = pytest.mark.unit

ROLE = "arn:aws:iam::123456789012:role/gang-node"
IDS = ("i-0000000000000000b", "i-0000000000000000a")


def spec(**overrides: Any) -> PoolSpec:
    values: dict[str, Any] = {
        "cluster": "demo",
        "pool": "p1",
        "region": "us-east-1",
        "node_role_arn": ROLE,
        "instance_profile_name": "atomic-gang-instance-profile-demo-gang-node",
        "image_id": "ami-0123456789abcdef0",
        "instance_type": "p5.48xlarge",
        "user_data": "nodeadm",
        "security_group_ids": ("sg-1",),
        "efa_network_cards": (0, 1),
        "placement_group": True,
        "tags": {c.TAG_POOL: "p1"},
    }
    values.update(overrides)
    return PoolSpec(**values)


def test_spec_round_trips_through_json_values() -> None:
    original = spec()
    assert PoolSpec.from_dict(original.to_dict()) == original
    assert original.placement_group_name == "atomic-gang-demo-p1"
    assert spec(placement_group=False).placement_group_name is None


@pytest.mark.parametrize("field", ["cluster", "pool", "image_id", "user_data"])
def test_spec_refuses_empty_essentials(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        spec(**{field: ""})


def test_record_sorts_and_validates_ids() -> None:
    assert InstanceSetRecord("gen-0", IDS).instance_ids == tuple(sorted(IDS))
    for bad in ((), ("i-1",), (IDS[0], IDS[0])):
        with pytest.raises(ValueError):
            InstanceSetRecord("gen-0", bad)
    with pytest.raises(ValueError):
        InstanceSetRecord("", IDS)


def test_names_stay_within_ec2_limits_and_distinct() -> None:
    assert launch_template_name("demo", "p1") == "atomic-gang-demo-p1"
    long_a = launch_template_name("c" * 100, "a" * 63)
    long_b = launch_template_name("c" * 100, "b" * 63)
    assert len(long_a) == 128 and long_a != long_b
    assert len(placement_group_name("c" * 100, "p" * 63)) <= 255


def test_pool_spec_for_follows_settings_and_shape() -> None:
    settings = Settings.model_validate(
        {
            "cluster_name": "demo",
            "defaults": {"region": "us-east-1", "node_role_arn": ROLE},
            "aws": {"endpoint_url": "http://127.0.0.1:5000"},
            "iam": {"self_manage_instance_profile": True},
            "pulumi": UNREACHED_BACKEND,
        }
    )
    shape = GangShape(
        pool="p1",
        count=4,
        instance_type="p5.48xlarge",
        mode="runinstances",
        region="us-east-1",
        node_role_arn=ROLE,
        keep_warm_ttl=timedelta(minutes=10),
        max_lifetime=timedelta(hours=4),
        ami_variant="nvidia",
    )

    result = pool_spec_for(
        settings,
        shape,
        PoolLookups(
            image_id="ami-0123456789abcdef0",
            user_data="ud",
            security_group_ids=["sg-2", "sg-1"],
            efa_network_cards=[0, 1],
        ),
    )

    assert result.instance_profile_name == "atomic-gang-instance-profile-demo-gang-node"
    assert result.manage_instance_profile and not result.manage_access_entry
    assert result.endpoint_url == "http://127.0.0.1:5000"
    assert result.security_group_ids == ("sg-1", "sg-2")
    assert result.tags == {
        c.TAG_MANAGED: "true",
        c.TAG_CLUSTER: "demo",
        c.TAG_POOL: "p1",
        c.TAG_MAX_LIFETIME: "4h0m0s",
        c.cluster_ownership_tag("demo"): "owned",
    }
    assert result.capacity_reservation_id == "" and result.capacity_reservation_kind == ""

    gpu = shape.model_copy(
        update={"capacity_reservation_id": "cr-0fedcba9876543210", "placement_group": "cluster"}
    )
    on_block = pool_spec_for(
        settings,
        gpu,
        PoolLookups(
            image_id="ami-0123456789abcdef0",
            user_data="ud",
            efa_network_cards=[0, 1],
            placement_group=True,
            capacity_reservation_kind="capacity-block",
        ),
    )
    assert on_block.capacity_reservation_id == "cr-0fedcba9876543210"
    assert on_block.capacity_reservation_kind == "capacity-block"
    assert on_block.placement_group_name == "atomic-gang-demo-p1"
    assert on_block.efa_network_cards == (0, 1)
    assert PoolSpec.from_dict(on_block.to_dict()) == on_block


def root_outputs(**extra: Any) -> dict[str, Any]:
    return {
        keys.POOL: "p1",
        keys.CLUSTER: "demo",
        keys.POOL_SPEC: spec().to_dict(),
        keys.LAUNCH_TEMPLATE_ID: "lt-1",
        keys.LAUNCH_TEMPLATE_NAME: "atomic-gang-demo-p1",
        keys.LAUNCH_TEMPLATE_VERSION: "3",
        keys.INSTANCE_PROFILE_ARN: "arn:aws:iam::123456789012:instance-profile/x",
        keys.PLACEMENT_GROUP_NAME: "",
        keys.GROUP: "",
        keys.INSTANCE_IDS: [],
        **extra,
    }


class _Value:
    """Like the Automation API's OutputValue."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.secret = False


def test_outputs_parse_with_and_without_a_gang() -> None:
    empty = PoolOutputs.from_outputs(root_outputs())
    assert empty.record is None and empty.instance_ids == () and empty.group is None
    assert empty.spec == spec() and empty.placement_group_name is None

    wrapped = {k: _Value(v) for k, v in root_outputs(group="gen-1", instanceIds=list(IDS)).items()}
    gang = PoolOutputs.from_outputs(wrapped)
    assert gang.group == "gen-1" and gang.instance_ids == tuple(sorted(IDS))


@pytest.mark.parametrize(
    "raw",
    [{}, {keys.POOL: "p1"}, root_outputs(poolSpec="text"), root_outputs(instanceIds=["bad"])],
)
def test_outputs_that_are_not_a_pools_are_refused(raw: dict[str, Any]) -> None:
    with pytest.raises(OutputsError):
        PoolOutputs.from_outputs(raw)


def test_state_takes_the_gang_from_the_instance_set_resource() -> None:
    stale_root = root_outputs(group="gen-0", instanceIds=["i-00000000000000001"])
    latest = {
        "resources": [
            {"type": "pulumi:pulumi:Stack", "outputs": stale_root},
            {
                "type": "pulumi-python:dynamic/atomicgang:InstanceSet",
                "outputs": {"group": "gen-2", "instance_ids": list(IDS)},
            },
            # A replaced set awaiting deletion is not the pool's gang.
            {
                "type": "pulumi-python:dynamic/atomicgang:InstanceSet",
                "delete": True,
                "outputs": {"group": "gen-1", "instance_ids": ["i-00000000000000009"]},
            },
        ]
    }
    parsed = PoolOutputs.from_state(latest)
    assert parsed.group == "gen-2" and parsed.instance_ids == tuple(sorted(IDS))

    no_gang = PoolOutputs.from_state({"resources": latest["resources"][:1]})
    assert no_gang.record is None
    with pytest.raises(OutputsError):
        PoolOutputs.from_state({"resources": []})


def test_the_stacks_resource_ids_prove_its_template_and_group() -> None:
    """What the stack made, by EC2 id: the proof a leftover found by tag is the pool's
    (`cloud.leftovers`). A stack last updated before `placementGroupId` was exported
    still proves its group, from the group resource's own outputs."""
    fresh = PoolOutputs.from_outputs(root_outputs(placementGroupId="pg-0123456789abcdef0"))
    assert fresh.resource_ids == {fresh.launch_template_id, "pg-0123456789abcdef0"}
    older = PoolOutputs.from_state(
        {
            "resources": [
                {"type": "pulumi:pulumi:Stack", "outputs": root_outputs()},
                {
                    "type": "pulumi-python:dynamic/atomicgang:PlacementGroup",
                    "outputs": {"name": "atomic-gang-c-p", "group_id": "pg-0aaaaaaaaaaaaaaa1"},
                },
            ]
        }
    )
    assert older.resource_ids == {older.launch_template_id, "pg-0aaaaaaaaaaaaaaa1"}
    assert PoolOutputs.from_outputs(root_outputs()).resource_ids == {fresh.launch_template_id}
