"""Launch tags, their TagSpecifications, and parsing them back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.cloud.tags import (
    FLEET_RESOURCE_TYPES,
    RUNINSTANCES_RESOURCE_TYPES,
    format_go_duration,
    keep_warm_value,
    launch_tags,
    parse_go_duration,
    parse_tags,
    tag_specifications,
    tags_to_dict,
)
from provisioner.cloud.types import LaunchSpec, SubnetRef

pytestmark = pytest.mark.unit


def spec(**overrides: Any) -> LaunchSpec:
    fields: dict[str, Any] = {
        "pool_name": "pretrain",
        "pool_uid": "uid-1",
        "acquire_generation": 2,
        "cluster_name": "prod",
        "count": 2,
        "instance_type": "p5.48xlarge",
        "mode": "runinstances",
        "subnets": (SubnetRef("subnet-1", "us-east-1a"),),
        "max_lifetime": timedelta(hours=6),
    }
    fields.update(overrides)
    return LaunchSpec(**fields)


def test_launch_tags_are_the_design_set() -> None:
    tags = launch_tags(spec(extra_tags={"team": "ml"}))
    assert tags == {
        "team": "ml",
        c.TAG_MANAGED: "true",
        c.TAG_CLUSTER: "prod",
        c.TAG_POOL: "pretrain",
        c.TAG_GROUP: "gen-2",
        c.TAG_MAX_LIFETIME: "6h0m0s",
        c.TAG_KEEP_WARM_UNTIL: "",
        "kubernetes.io/cluster/prod": "owned",
    }


@pytest.mark.parametrize("key", [c.TAG_MANAGED, c.TAG_POOL, "kubernetes.io/cluster/prod"])
def test_extra_tags_cannot_override_ours(key: str) -> None:
    with pytest.raises(ValueError, match="controller's own keys"):
        launch_tags(spec(extra_tags={key: "x"}))


def test_tag_specifications_cover_each_resource_type() -> None:
    specs = tag_specifications({"a": "1"}, RUNINSTANCES_RESOURCE_TYPES)
    assert [s["ResourceType"] for s in specs] == ["instance", "volume", "network-interface"]
    assert all(s["Tags"] == [{"Key": "a", "Value": "1"}] for s in specs)
    assert [s["ResourceType"] for s in tag_specifications({}, FLEET_RESOURCE_TYPES)] == [
        "instance",
        "fleet",
    ]


@pytest.mark.parametrize(
    ("duration", "text"),
    [
        (timedelta(hours=4), "4h0m0s"),
        (timedelta(minutes=15), "15m0s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(0), "0s"),
        (timedelta(days=2, seconds=1), "48h0m1s"),
    ],
)
def test_go_durations_round_trip(duration: timedelta, text: str) -> None:
    assert format_go_duration(duration) == text
    assert parse_go_duration(text) == duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4h", timedelta(hours=4)),
        ("1h30m", timedelta(minutes=90)),
        ("1.5h", timedelta(minutes=90)),
        ("500ms", timedelta(milliseconds=500)),
        ("0", timedelta(0)),
        ("", None),
        ("4 hours", None),
        ("h", None),
        ("10", None),
        ("-4h", None),
    ],
)
def test_parse_go_duration(text: str, expected: timedelta | None) -> None:
    assert parse_go_duration(text) == expected


def test_keep_warm_values() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert keep_warm_value(datetime(2030, 1, 1, 12, 0, tzinfo=plus_two)) == "2030-01-01T10:00:00Z"
    assert keep_warm_value(None) == ""
    with pytest.raises(ValueError, match="timezone-aware"):
        keep_warm_value(datetime(2030, 1, 1))


def test_parse_tags_back() -> None:
    raw = [
        {"Key": c.TAG_MANAGED, "Value": "true"},
        {"Key": c.TAG_CLUSTER, "Value": "prod"},
        {"Key": c.TAG_POOL, "Value": "pretrain"},
        {"Key": c.TAG_GROUP, "Value": "gen-2"},
        {"Key": c.TAG_MAX_LIFETIME, "Value": "6h0m0s"},
        {"Key": c.TAG_KEEP_WARM_UNTIL, "Value": "2030-01-01T10:00:00Z"},
    ]
    parsed = parse_tags(tags_to_dict(raw))
    assert parsed.managed and parsed.cluster == "prod" and parsed.pool == "pretrain"
    assert parsed.group == "gen-2" and parsed.max_lifetime == timedelta(hours=6)
    assert parsed.keep_warm_until == datetime(2030, 1, 1, 10, tzinfo=UTC)
    bare = parse_tags({c.TAG_MAX_LIFETIME: "forever", c.TAG_KEEP_WARM_UNTIL: "soon"})
    assert not bare.managed and bare.max_lifetime is None and bare.keep_warm_until is None
