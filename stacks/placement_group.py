"""The pool's cluster placement group (optional): a dynamic resource on boto3.

Declared by ``stacks.pool_program`` when the pool's spec asks for one; the launch template then
points its launches at it. Named from cluster and pool, so a create whose result was lost is
adopted rather than duplicated. Delete runs after the instance set's (the program makes the
set depend on it): EC2 refuses to delete a group that still holds instances.
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

from provisioner.api.constants import FailureKind
from stacks.aws import client, code_of
from stacks.base import PoolProvider, PoolResource, diff_by_keys
from stacks.failures import PoolResourceError, as_pool_error

__all__ = ["PlacementGroup", "PlacementGroupProvider", "adopt", "placement_group_request"]

REPLACE_KEYS: Final = ("name", "strategy", "region")
_DUPLICATE: Final = "InvalidPlacementGroup.Duplicate"
_UNKNOWN: Final = frozenset({"InvalidPlacementGroup.Unknown", "InvalidPlacementGroup.NotFound"})
_IN_USE: Final = "InvalidPlacementGroup.InUse"


def placement_group_request(props: Mapping[str, Any]) -> dict[str, Any]:
    request: dict[str, Any] = {
        "GroupName": props["name"],
        "Strategy": props.get("strategy") or "cluster",
    }
    tags = dict(props.get("tags") or {})
    if tags:
        request["TagSpecifications"] = [
            {
                "ResourceType": "placement-group",
                "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
            }
        ]
    return request


def _describe(ec2: Any, name: str) -> dict[str, Any] | None:
    try:
        groups = ec2.describe_placement_groups(GroupNames=[name]).get("PlacementGroups") or []
    except Exception as exc:
        if code_of(exc) in _UNKNOWN:
            return None
        raise as_pool_error(exc, f"DescribePlacementGroups {name}") from exc
    return dict(groups[0]) if groups else None


def _outs(props: Mapping[str, Any], group: Mapping[str, Any]) -> dict[str, Any]:
    return {**props, "group_id": str(group.get("GroupId") or "")}


class PlacementGroupProvider(PoolProvider):
    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = [
            CheckFailure(key, f"{key} is required")
            for key in ("name", "region")
            if not news.get(key)
        ]
        if news.get("strategy", "cluster") not in ("cluster", "spread", "partition"):
            failures.append(CheckFailure("strategy", "must be cluster, spread or partition"))
        return CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_by_keys(olds, news, replace_keys=REPLACE_KEYS, update_keys=("endpoint", "tags"))

    def create(self, props: dict[str, Any]) -> CreateResult:
        ec2 = client("ec2", props)
        try:
            made = (
                ec2.create_placement_group(**placement_group_request(props)).get("PlacementGroup")
                or {}
            )
        except Exception as exc:
            if code_of(exc) != _DUPLICATE:
                raise as_pool_error(exc, f"CreatePlacementGroup {props['name']}") from exc
            made = _describe(ec2, str(props["name"])) or {}
        return CreateResult(str(props["name"]), _outs(props, made))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        found = _describe(client("ec2", props), id_)
        return ReadResult(id_, _outs(props, found)) if found else ReadResult("", {})

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult({**news, "group_id": olds.get("group_id", "")})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        try:
            client("ec2", props).delete_placement_group(GroupName=id_)
        except Exception as exc:
            code = code_of(exc)
            if code == _IN_USE:
                # On a delete, InUse means instances still run in the group (on a launch it
                # means another zone): the pool's own are terminated before its destroy, so
                # these are going, or are not the pool's.
                raise PoolResourceError(
                    "PlacementGroupInUse",
                    f"DeletePlacementGroup {id_} refused: instances still run in the group "
                    "(InvalidPlacementGroup.InUse). The destroy terminates the pool's own "
                    "first and is retried; if this stays, terminate what else runs there (aws "
                    f"ec2 describe-instances --filters Name=placement-group-name,Values={id_}).",
                    kind=FailureKind.RETRYABLE,
                ) from exc
            if code not in _UNKNOWN:
                raise as_pool_error(exc, f"DeletePlacementGroup {id_}") from exc


def adopt(props: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    found = _describe(client("ec2", props), str(props["name"]))
    return (str(props["name"]), _outs(props, found)) if found else None


class PlacementGroup(PoolResource):
    provider_type = PlacementGroupProvider
    output_names = ("group_id",)
    adopter = adopt

    group_id: pulumi.Output[str]
