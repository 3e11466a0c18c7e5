"""`tenancy.sharedPools`: what the installer may write, what each entry shares, and the
sentence a mistake gets."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from provisioner.api.settings import Settings, Tenancy
from tests.support.backends import UNREACHED_BACKEND
from tests.support.pools import NODE_ROLE

pytestmark = pytest.mark.unit


def settings(tenancy: Any) -> Settings:
    return Settings.model_validate(
        {
            "clusterName": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": "us-east-1", "nodeRoleArn": NODE_ROLE},
            "tenancy": tenancy,
        }
    )


def test_by_default_no_pool_is_shared() -> None:
    assert Settings.model_fields["tenancy"].default == Tenancy()
    assert not Tenancy().may_share("any-pool", "any-namespace")


@pytest.mark.parametrize(
    ("entry", "pool", "namespace", "shared"),
    [
        ({"pool": "train", "namespaces": ["team-b"]}, "train", "team-b", True),
        ({"pool": "train", "namespaces": ["team-b"]}, "train-2", "team-b", False),
        ({"pool": "train", "namespaces": ["team-b"]}, "train", "team-c", False),
        ({"pool": "shared-*", "namespaces": ["team-b", "team-c"]}, "shared-p5", "team-c", True),
        ({"pool": "shared-*", "namespaces": ["team-b"]}, "private", "team-b", False),
        ({"pool": "*", "namespaces": ["team-b"]}, "anything", "team-b", True),
        ({"pool": "train", "namespaces": ["*"]}, "train", "whoever", True),
    ],
)
def test_what_an_entry_shares(
    entry: dict[str, Any], pool: str, namespace: str, shared: bool
) -> None:
    assert settings({"sharedPools": [entry]}).tenancy.may_share(pool, namespace) is shared


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"pool": "Shared_*", "namespaces": ["team-b"]}, "tenancy.sharedPools[].pool"),
        ({"pool": "*-shared", "namespaces": ["team-b"]}, "tenancy.sharedPools[].pool"),
        ({"pool": "train", "namespaces": ["Team B"]}, "tenancy.sharedPools[].namespaces"),
        ({"pool": "train", "namespaces": []}, "namespaces"),
        ({"pool": "train", "namespace": ["team-b"]}, "namespace"),
    ],
)
def test_a_wrong_entry_is_refused_naming_the_field(entry: dict[str, Any], named: str) -> None:
    with pytest.raises(ValidationError) as err:
        settings({"sharedPools": [entry]})
    assert named in str(err.value)
