"""Deterministic names: instance profile, client tokens, group names."""

from __future__ import annotations

import pytest

from provisioner.cloud.naming import (
    client_token,
    group_name,
    instance_profile_name,
    role_name_from_arn,
)

pytestmark = pytest.mark.unit


def test_short_profile_name_is_the_convention() -> None:
    assert (
        instance_profile_name("prod", "eks-gang-node-role")
        == "atomic-gang-instance-profile-prod-eks-gang-node-role"
    )


def test_long_profile_name_is_hash_truncated_to_iam_limit() -> None:
    cluster, role = "c" * 100, "r" * 64
    name = instance_profile_name(cluster, role)
    assert len(name) == 128
    assert name.startswith("atomic-gang-instance-profile-" + "c" * 50)
    assert name == instance_profile_name(cluster, role)
    # Names that differ only past the cut still differ.
    assert name != instance_profile_name(cluster, "r" * 63 + "x")
    digest = name.rpartition("-")[2]
    assert len(digest) == 10 and int(digest, 16) >= 0


def test_exactly_128_is_kept_whole() -> None:
    role = "r" * (128 - len("atomic-gang-instance-profile-c-"))
    assert instance_profile_name("c", role) == f"atomic-gang-instance-profile-c-{role}"


def test_role_name_from_arn() -> None:
    assert role_name_from_arn("arn:aws:iam::123456789012:role/eks-node") == "eks-node"
    assert role_name_from_arn("arn:aws:iam::123456789012:role/team/a/eks-node") == "eks-node"
    with pytest.raises(ValueError, match="not an IAM role ARN"):
        role_name_from_arn("eks-node")


def test_client_token_is_deterministic_short_and_distinct() -> None:
    uid = "7c1f0e4a-1111-4222-8333-944455556666"
    token = client_token(uid, 3, "subnet-0abc")
    assert token == client_token(uid, 3, "subnet-0abc")
    assert token.startswith("agp-3-") and len(token) <= 64
    assert token != client_token(uid, 4, "subnet-0abc")
    assert token != client_token(uid, 3, "subnet-0def")
    assert token != client_token("another-uid", 3, "subnet-0abc")
    assert len(client_token(uid, 10**12, "fleet")) <= 64
    with pytest.raises(ValueError):
        client_token("", 1, "fleet")
    with pytest.raises(ValueError):
        client_token(uid, -1, "fleet")


def test_group_name_follows_the_generation() -> None:
    assert group_name(0) == "gen-0"
    assert group_name(17) == "gen-17"
    with pytest.raises(ValueError):
        group_name(-1)
