"""The installer's policy for buying Capacity Blocks (`blockPurchase`): off by default, a
fee cap required to turn it on, and each refusal naming the setting and the fix."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

from provisioner.api.settings import BlockPurchasePolicy, Settings
from tests.support.backends import UNREACHED_BACKEND

pytestmark = pytest.mark.unit


def test_buying_is_off_unless_enabled() -> None:
    settings = Settings.model_validate(
        {
            "cluster_name": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {
                "region": "us-east-1",
                "node_role_arn": "arn:aws:iam::123456789012:role/node",
            },
        }
    )
    policy = settings.purchase_policy("p5.48xlarge")
    assert policy.enabled is False and policy.max_upfront_fee_per_gang is None


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"enabled": True}, "maxUpfrontFeePerGang"),
        ({"maxDuration": "23h"}, "shorter than 24h"),
        ({"maxUpfrontFeePerGang": "-1"}, "greater than or equal to 0"),
        ({"maxUpfrontFeePerGang": "12.345"}, "decimal places"),
        ({"instanceTypes": ["p5*.large"]}, "blockPurchase.instanceTypes"),
        ({"availabilityZones": ["us_west_2a"]}, "availability_zones"),
        ({"latestStart": "0s"}, "latest_start"),
        ({"maxFee": "10"}, "Extra inputs are not permitted"),
    ],
)
def test_a_policy_that_cannot_be_right_is_refused(given: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        BlockPurchasePolicy.model_validate(given)


@pytest.mark.parametrize(
    ("given", "instance_type", "zone", "allowed"),
    [
        ({}, "p5.48xlarge", "us-west-2a", (True, True)),
        ({"instanceTypes": ["p5.*"]}, "p5.48xlarge", "us-west-2a", (True, True)),
        ({"instanceTypes": ["p5.*"]}, "p4d.24xlarge", "us-west-2a", (False, True)),
        ({"instanceTypes": ["p4d.24xlarge"]}, "p4d.24xlarge", "us-west-2a", (True, True)),
        ({"availabilityZones": ["us-west-2b"]}, "p5.48xlarge", "us-west-2a", (True, False)),
    ],
)
def test_types_and_zones_allowed(
    given: dict[str, Any], instance_type: str, zone: str, allowed: tuple[bool, bool]
) -> None:
    policy = BlockPurchasePolicy.model_validate(given)
    assert (policy.type_allowed(instance_type), policy.zone_allowed(zone)) == allowed


def test_an_enabled_policy_reads_the_chart_spelling() -> None:
    policy = BlockPurchasePolicy.model_validate(
        {"enabled": True, "maxUpfrontFeePerGang": "1600.50", "latestStart": "30m"}
    )
    assert policy.max_upfront_fee_per_gang == Decimal("1600.50")
    assert policy.latest_start == timedelta(minutes=30)
    assert policy.max_duration == timedelta(hours=336)
