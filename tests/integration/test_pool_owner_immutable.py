"""On the real apiserver, the GangNodePool CRD keeps a pool in its namespace: once
`spec.ownerNamespace` is set, no write changes or removes it; a pool from before pools had
an owner can be bound once (the upgrade path)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from provisioner.api import constants as c
from tests.support.pools import pool, pool_spec

GNP = (c.GROUP, c.VERSION, c.GNP_PLURAL)


@pytest.fixture
def pools(kube_api: Any) -> Iterator[tuple[k8s.CustomObjectsApi, list[str]]]:
    custom = k8s.CustomObjectsApi(kube_api)
    made: list[str] = []
    yield custom, made
    for name in made:
        custom.delete_cluster_custom_object(*GNP, name)


def _create(pools: tuple[k8s.CustomObjectsApi, list[str]], owner: str | None) -> str:
    custom, made = pools
    name = f"own-{uuid.uuid4().hex[:8]}"
    custom.create_cluster_custom_object(
        *GNP, pool(name, spec=pool_spec(pool=name, owner_namespace=owner))
    )
    made.append(name)
    return name


def _refused(custom: k8s.CustomObjectsApi, name: str, spec: dict[str, Any]) -> str:
    with pytest.raises(k8s.ApiException) as err:
        custom.patch_cluster_custom_object(*GNP, name, {"spec": spec})
    assert err.value.status == 422
    return str(json.loads(err.value.body)["message"])


def test_the_owner_namespace_can_be_neither_changed_nor_removed(
    pools: tuple[k8s.CustomObjectsApi, list[str]],
) -> None:
    custom, _ = pools
    name = _create(pools, "team-a")
    assert "ownerNamespace is immutable" in _refused(custom, name, {"ownerNamespace": "team-b"})
    assert "ownerNamespace cannot be removed" in _refused(custom, name, {"ownerNamespace": None})
    # Every other spec write goes through as before: a claim, and its release.
    claim = {"namespace": "team-a", "name": "wl", "uid": "u-1", "claimedAt": "2026-12-03T08:00:00Z"}
    custom.patch_cluster_custom_object(*GNP, name, {"spec": {"claim": claim}})
    custom.patch_cluster_custom_object(*GNP, name, {"spec": {"claim": None}})
    assert custom.get_cluster_custom_object(*GNP, name)["spec"]["ownerNamespace"] == "team-a"


def test_a_pool_from_before_owners_is_bound_once(
    pools: tuple[k8s.CustomObjectsApi, list[str]],
) -> None:
    custom, _ = pools
    name = _create(pools, None)
    custom.patch_cluster_custom_object(*GNP, name, {"spec": {"ownerNamespace": "team-a"}})
    assert "ownerNamespace is immutable" in _refused(custom, name, {"ownerNamespace": "team-b"})


def test_an_owner_that_is_not_a_namespace_name_is_refused(
    pools: tuple[k8s.CustomObjectsApi, list[str]],
) -> None:
    custom, _ = pools
    name = _create(pools, None)
    _refused(custom, name, {"ownerNamespace": "Team_A"})
