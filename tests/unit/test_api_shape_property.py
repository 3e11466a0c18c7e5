"""Property: any labels and annotations give a valid GangShape or a GangShapeError, never
anything else, and every problem names its key."""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShape, GangShapeError, parse_gang_shape
from tests.support.backends import UNREACHED_BACKEND

pytestmark = pytest.mark.unit

ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
SETTINGS = (
    Settings.model_validate(
        {
            "cluster_name": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": "us-east-1", "node_role_arn": ROLE},
        }
    ),
    Settings.model_validate(
        {
            "cluster_name": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": "us-east-1"},
            "limits": {"max_gang_size": 8, "max_keep_warm_ttl": "1h"},
            "allowed_node_role_arns": [ROLE],
            "allowed_instance_types": ["p4d.24xlarge", "g6*"],
        }
    ),
)
VALID = {
    c.ANN_COUNT: "4",
    c.ANN_INSTANCE_TYPE: "p4d.24xlarge",
    c.ANN_NODE_ROLE_ARN: ROLE,
}
REASONS = {getattr(c, name) for name in dir(c) if name.startswith("REASON_")}

plausible_values = st.sampled_from(
    [
        "4",
        "0",
        "65",
        "p4d.24xlarge",
        "g6e.xlarge",
        "m5.large",
        "runinstances",
        "fleet",
        "us-east-1",
        "us-east-1a,us-east-1b",
        "us-east-1a,",
        "subnet-0123456789abcdef0",
        ROLE,
        "10m",
        "1h30m",
        "-5s",
        "99999h",
        "nvidia",
        "neuron",
        "ami-0123456789abcdef0",
        "cr-0123456789abcdef0",
        "",
        " ",
    ]
)
# Durations, numbers and lists are made of these, so junk often gets far into a parser.
junk_values = st.one_of(
    st.text(max_size=24),
    st.text(alphabet="0123456789.+-hmsuµμnx ", max_size=10),
    st.text(alphabet="abcdefus-0123456789, ", max_size=24),
)
values = st.one_of(plausible_values, junk_values)


def _typo(key: str, index: int, char: str) -> str:
    i = len(c.PREFIX) + index % (len(key) - len(c.PREFIX))
    return key[:i] + char + key[i + 1 :]


keys = st.one_of(
    st.sampled_from(c.GANG_ANNOTATIONS),
    st.builds(_typo, st.sampled_from(c.GANG_ANNOTATIONS), st.integers(0, 40), st.characters()),
    st.text(max_size=12).map(lambda s: c.PREFIX + s),
    st.sampled_from([c.POOL_LABEL, "kueue.x-k8s.io/queue-name", "example.com/note"]),
    st.text(max_size=20),
)
mostly = st.sampled_from([True, True, True, False])
# Start from a valid Job most of the time, so both outcomes are exercised often.
annotation_maps = st.builds(
    lambda start_valid, extra: {**(VALID if start_valid else {}), **extra},
    mostly,
    st.dictionaries(keys, values, max_size=6),
)
label_maps = st.builds(
    lambda has_pool, extra: {**({c.POOL_LABEL: "pretrain-p4d"} if has_pool else {}), **extra},
    mostly,
    st.dictionaries(
        st.sampled_from([c.POOL_LABEL, c.QUEUE_NAME_LABEL, c.ANN_COUNT]),
        st.one_of(st.sampled_from(["pool-b", "a" * 63, "a" * 64, "Bad_Name", " x "]), st.text()),
        max_size=2,
    ),
)
pod_counts = st.one_of(st.just(4), st.just(4), st.integers(-3, 100))


@settings(max_examples=2000, deadline=None)
@given(
    labels=label_maps,
    annotations=annotation_maps,
    pods=pod_counts,
    config=st.sampled_from(SETTINGS),
)
def test_parse_returns_a_shape_or_a_gang_shape_error(
    labels: dict[str, str], annotations: dict[str, str], pods: int, config: Settings
) -> None:
    try:
        shape = parse_gang_shape(labels, annotations, pods, config)
    except GangShapeError as err:
        event(f"refused: {err.reason}")
        assert err.problems
        assert err.reason in REASONS
        text = str(err)
        for p in err.problems:
            assert p.key, p
            assert p.key in p.message
            assert p.reason in REASONS
            assert p.message in text
            assert p.accepted
            if p.value is not None:
                assert p.key in labels or p.key in annotations
        return
    event("accepted")
    # Anything accepted is a valid, self-consistent model that survives the API round trip.
    assert isinstance(shape, GangShape)
    assert GangShape.from_dict(shape.to_dict()) == shape
    assert shape.count == pods <= config.limits.max_gang_size
    assert shape.pool == labels[c.POOL_LABEL].strip()
    assert shape.region == config.defaults.region
    assert config.instance_type_allowed(shape.instance_type)
    assert shape.node_role_arn in config.allowed_node_roles
    assert shape.keep_warm_ttl <= config.limits.max_keep_warm_ttl
    assert not (shape.availability_zones and shape.subnets)
