"""The node role's EKS access entry: verified by default, created when managed.

Declared by ``stacks.pool_program``; its provider runs in the Pulumi provider host. Gang nodes
register with the cluster through an ``EC2_LINUX`` access entry of their node role. By
default the pool's stack only checks that it exists and has that type
(``provisioner.cloud.preflight``); with ``iam.manageAccessEntry`` it creates the entry when
missing. Like the instance profile, the entry is shared by every pool using the node role,
so delete leaves it in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    UpdateResult,
)

from provisioner.api import constants as c
from provisioner.cloud.preflight import verify_access_entry
from stacks.aws import client, code_of
from stacks.base import PoolProvider, PoolResource, diff_by_keys
from stacks.failures import PoolResourceError, as_pool_error

__all__ = ["ENTRY_TYPE", "AccessEntry", "AccessEntryProvider", "adopt"]

ENTRY_TYPE: Final = "EC2_LINUX"
REPLACE_KEYS: Final = ("cluster", "role_arn", "manage")
_IN_USE: Final = "ResourceInUseException"


def entry_id(props: Mapping[str, Any]) -> str:
    return f"{props['cluster']}/{props['role_arn']}"


def _verified(eks: Any, props: Mapping[str, Any]) -> dict[str, Any]:
    try:
        verify_access_entry(eks, str(props["cluster"]), str(props["role_arn"]))
    except Exception as exc:
        raise as_pool_error(exc, f"DescribeAccessEntry {props['role_arn']}") from exc
    return {**props, "type": ENTRY_TYPE}


def _ensure(eks: Any, props: Mapping[str, Any]) -> None:
    try:
        eks.create_access_entry(
            clusterName=str(props["cluster"]),
            principalArn=str(props["role_arn"]),
            type=ENTRY_TYPE,
            tags={
                **dict(props.get("extra_tags") or {}),
                c.TAG_MANAGED: "true",
                c.TAG_CLUSTER: str(props["cluster"]),
            },
        )
    except Exception as exc:
        # In use: it exists already (ours from an earlier pass, or the bootstrap's).
        if code_of(exc) != _IN_USE:
            raise as_pool_error(exc, f"CreateAccessEntry {props['role_arn']}") from exc


class AccessEntryProvider(PoolProvider):
    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = [
            CheckFailure(key, f"{key} is required")
            for key in ("cluster", "role_arn", "region")
            if not news.get(key)
        ]
        return CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_by_keys(olds, news, replace_keys=REPLACE_KEYS, update_keys=("endpoint",))

    def create(self, props: dict[str, Any]) -> CreateResult:
        eks = client("eks", props)
        if props.get("manage"):
            _ensure(eks, props)
        return CreateResult(entry_id(props), _verified(eks, props))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        try:
            return ReadResult(id_, _verified(client("eks", props), props))
        except PoolResourceError as exc:
            if exc.reason == "AccessEntryMissing":
                return ReadResult("", {})
            raise

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult({**news, "type": olds.get("type", ENTRY_TYPE)})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        # Shared by every pool with this node role: see the module docstring.
        return None


def adopt(props: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    try:
        return entry_id(props), _verified(client("eks", props), props)
    except PoolResourceError:
        return None


class AccessEntry(PoolResource):
    provider_type = AccessEntryProvider
    output_names = ("type",)
    adopter = adopt

    type: pulumi.Output[str]
