"""Gang shape rules: one accept and at least one refusal per rule of the annotation table."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.api.shape import (
    GangShape,
    GangShapeError,
    default_ami_variant,
    describe_shape_conflict,
    parse_gang_shape,
    shape_differences,
)
from tests.support.backends import UNREACHED_BACKEND

pytestmark = pytest.mark.unit

ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
ROLE_B = "arn:aws:iam::123456789012:role/second-node-role"
OTHER_ROLE = "arn:aws:iam::123456789012:role/not-allowed"

SETTINGS = Settings.model_validate(
    {
        "cluster_name": "demo",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {"region": "us-east-1", "node_role_arn": ROLE},
    }
)
# No default role: every Job names one from the allowlist. Instance types are restricted.
STRICT = Settings.model_validate(
    {
        "cluster_name": "demo",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {"region": "us-east-1"},
        "allowed_node_role_arns": [ROLE, ROLE_B],
        "allowed_instance_types": ["p4d.24xlarge", "p5.*"],
    }
)

LABELS = {c.POOL_LABEL: "pretrain-p4d", c.QUEUE_NAME_LABEL: "gang-queue"}
BASE = {c.ANN_COUNT: "4", c.ANN_INSTANCE_TYPE: "p4d.24xlarge"}


def parse(
    annotations: dict[str, str] | None = None,
    *,
    labels: dict[str, str] | None = None,
    pods: int = 4,
    settings: Settings = SETTINGS,
) -> GangShape:
    return parse_gang_shape(
        LABELS if labels is None else labels,
        BASE if annotations is None else annotations,
        pods,
        settings,
    )


def with_(**changes: str | None) -> dict[str, str]:
    """BASE with annotations set (by short name, '_' for '-') or removed (None)."""
    out = dict(BASE)
    for short, value in changes.items():
        key = c.PREFIX + short.replace("_", "-")
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def test_minimal_job_gets_every_default() -> None:
    shape = parse()
    assert shape == GangShape(
        pool="pretrain-p4d",
        count=4,
        instance_type="p4d.24xlarge",
        mode="runinstances",
        region="us-east-1",
        node_role_arn=ROLE,
        keep_warm_ttl=timedelta(minutes=10),
        max_lifetime=timedelta(hours=4),
        ami_variant="nvidia",
    )


def test_reference_example_job_is_accepted() -> None:
    shape = parse(
        with_(
            mode="runinstances",
            region="us-east-1",
            availability_zones="us-east-1a",
            node_role_arn=ROLE,
            keep_warm_ttl="15m",
            max_lifetime="6h",
            capacity_reservation_id="cr-0123456789abcdef0",
        )
    )
    assert shape.availability_zones == ("us-east-1a",)
    assert shape.keep_warm_ttl == timedelta(minutes=15)
    assert shape.max_lifetime == timedelta(hours=6)
    assert shape.capacity_reservation_id == "cr-0123456789abcdef0"


# --- accepted values, one or more per rule ---------------------------------------------


@dataclass
class Ok:
    annotations: dict[str, str]
    check: dict[str, object]
    labels: dict[str, str] = field(default_factory=lambda: LABELS)
    pods: int = 4
    settings: Settings = SETTINGS


ACCEPT = {
    "block of a day": Ok(
        with_(capacity_block_duration="24h"), {"capacity_block_duration": timedelta(hours=24)}
    ),
    "block of two weeks": Ok(
        with_(capacity_block_duration="336h"), {"capacity_block_duration": timedelta(days=14)}
    ),
    "block in days spelt as minutes": Ok(
        with_(capacity_block_duration="2880m"), {"capacity_block_duration": timedelta(days=2)}
    ),
    "pool 63 chars": Ok(BASE, {"pool": "a" * 63}, labels={c.POOL_LABEL: "a" * 63}),
    "pool digits and dashes": Ok(BASE, {"pool": "0-a-9"}, labels={c.POOL_LABEL: "0-a-9"}),
    "count at the limit": Ok(with_(count="64"), {"count": 64}, pods=64),
    "count surrounding space": Ok(with_(count=" 4 "), {"count": 4}),
    "type exact allowlist": Ok(
        with_(node_role_arn=ROLE), {"instance_type": "p4d.24xlarge"}, settings=STRICT
    ),
    "type glob allowlist": Ok(
        with_(instance_type="p5.48xlarge", node_role_arn=ROLE),
        {"instance_type": "p5.48xlarge"},
        settings=STRICT,
    ),
    "type with dashes": Ok(with_(instance_type="u-6tb1.metal"), {"ami_variant": "standard"}),
    "mode fleet": Ok(with_(mode="fleet"), {"mode": "fleet"}),
    "region equal": Ok(with_(region="us-east-1"), {"region": "us-east-1"}),
    "zones list": Ok(
        with_(availability_zones="us-east-1b, us-east-1a"),
        {"availability_zones": ("us-east-1b", "us-east-1a")},
    ),
    "subnets list": Ok(
        with_(subnets="subnet-0123456789abcdef0,subnet-89abcdef"),
        {"subnets": ("subnet-0123456789abcdef0", "subnet-89abcdef")},
    ),
    "role explicit default": Ok(with_(node_role_arn=ROLE), {"node_role_arn": ROLE}),
    "role in allowlist": Ok(
        with_(node_role_arn=ROLE_B), {"node_role_arn": ROLE_B}, settings=STRICT
    ),
    "role with path": Ok(
        with_(node_role_arn="arn:aws:iam::123456789012:role/x/y/z"),
        {"node_role_arn": "arn:aws:iam::123456789012:role/x/y/z"},
        settings=Settings.model_validate(
            {
                "cluster_name": "demo",
                "pulumi": UNREACHED_BACKEND,
                "defaults": {"region": "us-east-1"},
                "allowed_node_role_arns": ["arn:aws:iam::123456789012:role/x/y/z"],
            }
        ),
    ),
    "keep-warm zero": Ok(with_(keep_warm_ttl="0s"), {"keep_warm_ttl": timedelta(0)}),
    "keep-warm at limit": Ok(with_(keep_warm_ttl="24h"), {"keep_warm_ttl": timedelta(hours=24)}),
    "keep-warm compound": Ok(
        with_(keep_warm_ttl="1h30m"), {"keep_warm_ttl": timedelta(minutes=90)}
    ),
    "max-lifetime": Ok(with_(max_lifetime="90m"), {"max_lifetime": timedelta(minutes=90)}),
    "ami-variant explicit": Ok(with_(ami_variant="standard"), {"ami_variant": "standard"}),
    "ami-id 17 hex": Ok(with_(ami_id="ami-0123456789abcdef0"), {"ami_id": "ami-0123456789abcdef0"}),
    "ami-id 8 hex": Ok(with_(ami_id="ami-0123abcd"), {"ami_id": "ami-0123abcd"}),
    "reservation 17 hex": Ok(
        with_(capacity_reservation_id="cr-0123456789abcdef0"),
        {"capacity_reservation_id": "cr-0123456789abcdef0"},
    ),
    "reservation 8 hex": Ok(
        with_(capacity_reservation_id="cr-0123abcd"), {"capacity_reservation_id": "cr-0123abcd"}
    ),
    "efa and placement default off": Ok(BASE, {"efa": False, "placement_group": "none"}),
    "efa true": Ok({**BASE, c.ANN_EFA: "true"}, {"efa": True}),
    "efa any case": Ok({**BASE, c.ANN_EFA: "False"}, {"efa": False}),
    "placement cluster": Ok(
        {**BASE, c.ANN_PLACEMENT_GROUP: "cluster"}, {"placement_group": "cluster"}
    ),
    "placement none": Ok({**BASE, c.ANN_PLACEMENT_GROUP: "none"}, {"placement_group": "none"}),
    "empty optional means unset": Ok(
        with_(capacity_reservation_id="", subnets=" ", mode=""),
        {"capacity_reservation_id": None, "subnets": (), "mode": "runinstances"},
    ),
    "other prefixes ignored": Ok(
        {**BASE, "kubectl.kubernetes.io/last-applied-configuration": "{}", "x/count": "9"},
        {"count": 4},
    ),
}


@pytest.mark.parametrize("case", ACCEPT.values(), ids=ACCEPT.keys())
def test_accepts(case: Ok) -> None:
    shape = parse(case.annotations, labels=case.labels, pods=case.pods, settings=case.settings)
    for name, expected in case.check.items():
        assert getattr(shape, name) == expected


@pytest.mark.parametrize(
    ("instance_type", "variant"),
    [
        ("p4d.24xlarge", "nvidia"),
        ("p5.48xlarge", "nvidia"),
        ("g5.xlarge", "nvidia"),
        ("g6e.12xlarge", "nvidia"),
        ("inf2.xlarge", "neuron"),
        ("trn1n.32xlarge", "neuron"),
        ("trn2.48xlarge", "neuron"),
        ("m5.large", "standard"),
        ("c7gn.16xlarge", "standard"),
        ("i4i.large", "standard"),
        ("mac2-m2pro.metal", "standard"),
    ],
)
def test_ami_variant_derives_from_family(instance_type: str, variant: str) -> None:
    assert default_ami_variant(instance_type) == variant
    assert parse(with_(instance_type=instance_type)).ami_variant == variant


# --- refusals ----------------------------------------------------------------------------


@dataclass
class Bad:
    key: str
    reason: str
    accepted: str  # a fragment of the accepted form the message must show
    annotations: dict[str, str] = field(default_factory=lambda: BASE)
    labels: dict[str, str] = field(default_factory=lambda: LABELS)
    pods: int = 4
    settings: Settings = SETTINGS

    @property
    def value(self) -> str | None:
        source = self.labels if self.key == c.POOL_LABEL else self.annotations
        raw = source.get(self.key, "").strip()
        return raw or None


MISSING, INVALID = c.REASON_MISSING_ANNOTATION, c.REASON_INVALID_ANNOTATION


def bad(
    short: str,
    value: str,
    reason: str = INVALID,
    accepted: str = "",
    *,
    pods: int = 4,
    settings: Settings = SETTINGS,
) -> Bad:
    key = c.PREFIX + short
    annotations = {**BASE, key: value}
    if settings is STRICT and key != c.ANN_NODE_ROLE_ARN:
        annotations[c.ANN_NODE_ROLE_ARN] = ROLE  # STRICT has no default role
    return Bad(key, reason, accepted, annotations, pods=pods, settings=settings)


def no_pool(value: str | None, reason: str) -> Bad:
    labels = {} if value is None else {c.POOL_LABEL: value}
    return Bad(c.POOL_LABEL, reason, '"pretrain-p4d"', labels=labels)


REFUSE = {
    "pool missing": no_pool(None, c.REASON_MISSING_LABEL),
    "pool uppercase": no_pool("Pretrain", c.REASON_INVALID_LABEL),
    "pool underscore": no_pool("pre_train", c.REASON_INVALID_LABEL),
    "pool leading dash": no_pool("-pool", c.REASON_INVALID_LABEL),
    "pool 64 chars": no_pool("a" * 64, c.REASON_INVALID_LABEL),
    "count missing": Bad(c.ANN_COUNT, MISSING, "from 1 to 64", annotations=with_(count=None)),
    "count words": bad("count", "four", accepted="whole number"),
    "count zero": bad("count", "0", accepted="from 1 to 64"),
    "count negative": bad("count", "-4", accepted="from 1 to 64"),
    "count plus sign": bad("count", "+4", accepted="from 1 to 64"),
    "count decimal": bad("count", "4.0", accepted="from 1 to 64"),
    "count arabic digit": bad("count", "٤", accepted="from 1 to 64"),
    "count huge": bad("count", "9" * 30, accepted="from 1 to 64"),
    "count over limit": bad("count", "65", c.REASON_EXCEEDS_LIMIT, "from 1 to 64", pods=65),
    "count mismatch": bad("count", "8", c.REASON_COUNT_MISMATCH, "make the Job run 8 pods"),
    "type missing": Bad(
        c.ANN_INSTANCE_TYPE, MISSING, '"p4d.24xlarge"', annotations=with_(instance_type=None)
    ),
    "type uppercase": bad("instance-type", "P4D.24XLARGE", accepted='"p4d.24xlarge"'),
    "type no size": bad("instance-type", "p4d", accepted='"p4d.24xlarge"'),
    "type not allowed": bad(
        "instance-type",
        "p4de.24xlarge",
        c.REASON_NOT_ALLOWED,
        "p4d.24xlarge, p5.*",
        settings=STRICT,
    ),
    "mode unknown": bad("mode", "burst", accepted='"fleet"'),
    "mode wrong case": bad("mode", "RunInstances", accepted='"runinstances"'),
    "region other": bad("region", "us-west-2", accepted='"us-east-1"'),
    "zones other region": bad("availability-zones", "us-west-2a", accepted='"us-east-1a"'),
    "zones no letter": bad("availability-zones", "us-east-1", accepted="zones in us-east-1"),
    "zones zone id": bad("availability-zones", "use1-az1", accepted="zones in us-east-1"),
    "zones empty entry": bad("availability-zones", "us-east-1a,,", accepted="comma-separated"),
    "zones duplicate": bad("availability-zones", "us-east-1a,us-east-1a", accepted="us-east-1"),
    "subnets short id": bad("subnets", "subnet-123", accepted='"subnet-0123456789abcdef0"'),
    "subnets wrong kind": bad("subnets", "sg-0123456789abcdef0", accepted="subnet ids"),
    "subnets duplicate": bad("subnets", "subnet-89abcdef,subnet-89abcdef", accepted="subnet ids"),
    "zones with subnets": Bad(
        c.ANN_SUBNETS,
        c.REASON_CONFLICTING_ANNOTATIONS,
        "not both",
        annotations=with_(availability_zones="us-east-1a", subnets="subnet-89abcdef"),
    ),
    "role missing without default": Bad(
        c.ANN_NODE_ROLE_ARN, MISSING, ROLE_B, annotations=BASE, settings=STRICT
    ),
    "role not an arn": bad("node-role-arn", "eks-gang-node-role", accepted=ROLE),
    "role is a user": bad(
        "node-role-arn", "arn:aws:iam::123456789012:user/bob", accepted="allowed node roles"
    ),
    "role not the default": bad("node-role-arn", OTHER_ROLE, c.REASON_NOT_ALLOWED, ROLE),
    "role not in allowlist": bad(
        "node-role-arn", OTHER_ROLE, c.REASON_NOT_ALLOWED, ROLE_B, settings=STRICT
    ),
    "keep-warm unit": bad("keep-warm-ttl", "10x", accepted='"15m"'),
    "keep-warm no unit": bad("keep-warm-ttl", "600", accepted='"15m"'),
    "keep-warm negative": bad("keep-warm-ttl", "-1m", accepted="from 0s to 24h0m0s"),
    "keep-warm over limit": bad(
        "keep-warm-ttl", "25h", c.REASON_EXCEEDS_LIMIT, "from 0s to 24h0m0s"
    ),
    "lifetime zero": bad("max-lifetime", "0s", accepted="positive Go duration"),
    "lifetime negative": bad("max-lifetime", "-1h", accepted='"6h"'),
    "lifetime prose": bad("max-lifetime", "forever", accepted='"6h"'),
    "variant unknown": bad("ami-variant", "cuda", accepted='"nvidia"'),
    "ami short": bad("ami-id", "ami-123", accepted='"ami-0123456789abcdef0"'),
    "ami uppercase": bad("ami-id", "ami-0123456789ABCDEF0", accepted='"ami-0123456789abcdef0"'),
    "reservation short": bad("capacity-reservation-id", "cr-123", accepted='"cr-0123456789a'),
    "reservation wrong kind": bad(
        "capacity-reservation-id", "cp-0123456789abcdef0", accepted="capacity reservation id"
    ),
    "efa not a boolean": bad("efa", "yes", accepted='"true"'),
    "placement spread": bad("placement-group", "spread", accepted='"cluster"'),
    "placement a group name": bad("placement-group", "my-pg", accepted='"cluster"'),
    "unknown key typo": bad("cuont", "4", c.REASON_UNKNOWN_ANNOTATION, "instance-type, mode"),
    "pool as annotation": bad("pool", "pretrain-p4d", c.REASON_UNKNOWN_ANNOTATION, "a label"),
    "block not a duration": bad("capacity-block-duration", "a day", accepted='such as "24h"'),
    "block not sold": bad("capacity-block-duration", "25h", accepted="24h to 336h in steps"),
    "block in minutes": bad("capacity-block-duration", "1440m30s", accepted="504h to 4368h"),
    "block between days and weeks": bad("capacity-block-duration", "360h", accepted="steps"),
    "block over the cap": bad(
        "capacity-block-duration", "504h", c.REASON_EXCEEDS_LIMIT, 'such as "24h"'
    ),
    "block beside a reservation": Bad(
        c.ANN_CAPACITY_BLOCK_DURATION,
        INVALID,
        "not both",
        {
            **with_(capacity_reservation_id="cr-0123456789abcdef0"),
            c.ANN_CAPACITY_BLOCK_DURATION: "24h",
        },
    ),
}


@pytest.mark.parametrize("case", REFUSE.values(), ids=REFUSE.keys())
def test_refuses(case: Bad) -> None:
    with pytest.raises(GangShapeError) as err:
        parse(case.annotations, labels=case.labels, pods=case.pods, settings=case.settings)
    problems = err.value.problems
    assert [(p.key, p.reason) for p in problems] == [(case.key, case.reason)]
    assert err.value.reason == case.reason
    problem = problems[0]
    assert problem.value == case.value
    message = str(err.value)
    assert message == problem.message
    assert case.key in message
    if case.value is None:
        assert "is not set" in message
    else:
        assert case.value[:20] in message  # the bad value, quoted
    assert case.accepted in message
    assert message.endswith(".")


def test_typo_suggests_the_known_key() -> None:
    with pytest.raises(GangShapeError) as err:
        parse({**BASE, c.PREFIX + "keep-warm-tll": "5m"})
    assert f"did you mean {c.ANN_KEEP_WARM_TTL}?" in str(err.value)


def test_count_set_as_label_is_pointed_out() -> None:
    with pytest.raises(GangShapeError) as err:
        parse(with_(count=None), labels={**LABELS, c.ANN_COUNT: "4"})
    assert "set as a label" in str(err.value)


def test_all_problems_are_collected_in_order() -> None:
    annotations = {
        c.ANN_COUNT: "8",
        c.ANN_MODE: "burst",
        c.ANN_KEEP_WARM_TTL: "48h",
        c.PREFIX + "zzz": "1",
    }
    with pytest.raises(GangShapeError) as err:
        parse(annotations, labels={})
    assert [(p.key, p.reason) for p in err.value.problems] == [
        (c.POOL_LABEL, c.REASON_MISSING_LABEL),
        (c.ANN_COUNT, c.REASON_COUNT_MISMATCH),
        (c.ANN_INSTANCE_TYPE, c.REASON_MISSING_ANNOTATION),
        (c.ANN_MODE, c.REASON_INVALID_ANNOTATION),
        (c.ANN_KEEP_WARM_TTL, c.REASON_EXCEEDS_LIMIT),
        (c.PREFIX + "zzz", c.REASON_UNKNOWN_ANNOTATION),
    ]
    assert err.value.reason == c.REASON_INVALID_GANG_SHAPE
    assert isinstance(err.value, ValueError)
    for p in err.value.problems:
        assert p.message in str(err.value)


def test_junk_values_are_shown_escaped_and_short() -> None:
    with pytest.raises(GangShapeError) as err:
        parse(with_(mode="a\nb" + "x" * 200))
    message = str(err.value)
    assert "\n" not in message
    assert '"a\\nb' in message
    assert "…" in message


# --- shape equality for pool reuse -------------------------------------------------------

POOL_SHAPE = parse(with_(availability_zones="us-east-1a"))


@pytest.mark.parametrize(
    ("changes", "differs"),
    [
        ({}, []),
        ({"keep_warm_ttl": timedelta(hours=1)}, []),
        ({"count": 8}, ["count"]),
        ({"instance_type": "p5.48xlarge"}, ["instance-type"]),
        ({"mode": "fleet"}, ["mode"]),
        ({"region": "us-west-2", "availability_zones": ()}, ["region", "availability-zones"]),
        ({"node_role_arn": ROLE_B}, ["node-role-arn"]),
        ({"ami_variant": "standard"}, ["ami-variant"]),
        ({"ami_id": "ami-0123abcd"}, ["ami-id"]),
        ({"availability_zones": ("us-east-1b",)}, ["availability-zones"]),
        (
            {"availability_zones": (), "subnets": ("subnet-89abcdef",)},
            ["availability-zones", "subnets"],
        ),
        ({"max_lifetime": timedelta(hours=8)}, ["max-lifetime"]),
        ({"capacity_reservation_id": "cr-0123abcd"}, ["capacity-reservation-id"]),
        ({"efa": True}, ["efa"]),
        ({"placement_group": "cluster"}, ["placement-group"]),
        ({"count": 2, "mode": "fleet"}, ["count", "mode"]),
    ],
)
def test_shape_differences(changes: dict[str, object], differs: list[str]) -> None:
    other = GangShape.model_validate({**POOL_SHAPE.model_dump(by_alias=False), **changes})
    assert shape_differences(POOL_SHAPE, other) == differs
    assert shape_differences(other, POOL_SHAPE) == differs


def test_conflict_description_names_both_values() -> None:
    other = POOL_SHAPE.model_copy(update={"count": 8, "max_lifetime": timedelta(hours=6)})
    text = describe_shape_conflict(POOL_SHAPE, other)
    assert "count (pool: 4, Job: 8)" in text
    assert "max-lifetime (pool: 4h0m0s, Job: 6h0m0s)" in text
    assert "different atomic-gang.k8s.aws/pool label" in text


def test_model_guards_placement_when_built_directly() -> None:
    with pytest.raises(ValueError, match="mutually exclusive"):
        GangShape.model_validate(
            {**POOL_SHAPE.model_dump(by_alias=False), "subnets": ("subnet-89abcdef",)}
        )
    with pytest.raises(ValueError, match="not in region"):
        GangShape.model_validate(
            {**POOL_SHAPE.model_dump(by_alias=False), "availability_zones": ("eu-west-1a",)}
        )
