"""The node instance profile of a pool: verified by default, created when self-managed.

Declared by ``stacks.pool_program``; its provider runs in the Pulumi provider host. The profile
is named by convention (``atomic-gang-instance-profile-<cluster>-<role>``) and usually made
by the bootstrap program, so by default the pool's stack only checks that it exists and
holds the node role (``provisioner.cloud.preflight``), failing with a message that says
which and how to fix it. With ``iam.selfManageInstanceProfile`` the stack creates it when
it is missing.

Delete never removes the profile: every pool whose gangs use the same node role shares it,
and destroying one pool must not break the others. It outlives the pools by design; the
bootstrap program or an operator owns its end.
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
from provisioner.cloud.naming import role_name_from_arn
from provisioner.cloud.preflight import verify_instance_profile
from stacks.aws import client, code_of
from stacks.base import PoolProvider, PoolResource, diff_by_keys
from stacks.failures import PoolResourceError, as_pool_error

__all__ = ["InstanceProfile", "InstanceProfileProvider", "adopt"]

REPLACE_KEYS: Final = ("name", "role_arn", "manage")
_NO_SUCH_ENTITY: Final = "NoSuchEntity"
_EXISTS: Final = "EntityAlreadyExists"


def _verified(iam: Any, props: Mapping[str, Any]) -> dict[str, Any]:
    try:
        ref = verify_instance_profile(iam, str(props["name"]), str(props["role_arn"]))
    except Exception as exc:
        raise as_pool_error(exc, f"GetInstanceProfile {props['name']}") from exc
    return {**props, "arn": ref.arn or ""}


def _ensure(iam: Any, props: Mapping[str, Any]) -> None:
    """Create the profile and put the node role in it, tolerating a half-done earlier pass."""
    name = str(props["name"])
    try:
        iam.create_instance_profile(
            InstanceProfileName=name,
            # The installer's extra tags first, so the controller's own keys win.
            Tags=[
                {"Key": str(k), "Value": str(v)}
                for k, v in {
                    **dict(props.get("extra_tags") or {}),
                    c.TAG_MANAGED: "true",
                    c.TAG_CLUSTER: str(props["cluster"]),
                }.items()
            ],
        )
    except Exception as exc:
        if code_of(exc) != _EXISTS:
            raise as_pool_error(exc, f"CreateInstanceProfile {name}") from exc
    roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"].get("Roles")
    if roles:
        return  # verification below says whether it is the right one
    try:
        iam.add_role_to_instance_profile(
            InstanceProfileName=name, RoleName=role_name_from_arn(str(props["role_arn"]))
        )
    except Exception as exc:
        raise as_pool_error(exc, f"AddRoleToInstanceProfile {name}") from exc


class InstanceProfileProvider(PoolProvider):
    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = [
            CheckFailure(key, f"{key} is required")
            for key in ("name", "role_arn", "cluster", "region")
            if not news.get(key)
        ]
        if news.get("role_arn"):
            try:
                role_name_from_arn(str(news["role_arn"]))
            except ValueError as exc:
                failures.append(CheckFailure("role_arn", str(exc)))
        return CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_by_keys(olds, news, replace_keys=REPLACE_KEYS, update_keys=("endpoint",))

    def create(self, props: dict[str, Any]) -> CreateResult:
        iam = client("iam", props)
        if props.get("manage"):
            _ensure(iam, props)
        return CreateResult(str(props["name"]), _verified(iam, props))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        try:
            return ReadResult(id_, _verified(client("iam", props), props))
        except PoolResourceError as exc:
            if exc.reason == "InstanceProfileNotFound":
                return ReadResult("", {})
            raise

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        # Only the endpoint can change without a replacement; AWS has nothing to do.
        return UpdateResult({**news, "arn": olds.get("arn", "")})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        # Shared by every pool with this node role: see the module docstring.
        return None


def adopt(props: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The profile, when it exists and holds the node role; None otherwise."""
    try:
        return str(props["name"]), _verified(client("iam", props), props)
    except PoolResourceError:
        return None


class InstanceProfile(PoolResource):
    provider_type = InstanceProfileProvider
    output_names = ("arn",)
    adopter = adopt

    arn: pulumi.Output[str]
