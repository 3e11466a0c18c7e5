"""A one-resource Pulumi program that proves the local Pulumi toolchain works end to end.

Used by the toolchain integration test and `atomic-gang doctor --local`: an inline
Automation API program whose single dynamic resource creates an EC2 security group through
boto3 (against the EC2 emulator), exports its id, and deletes it on destroy. If this goes
up and comes down, the CLI build, its version stamp, the file backend, the passphrase
secrets provider and the dynamic-provider launcher all work.
"""

from __future__ import annotations

from typing import Any

import boto3
import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider


def _ec2(props: dict[str, Any]) -> Any:
    # Built inside each call: a provider object is pickled into the state, a client is not.
    return boto3.client("ec2", region_name=props["region"], endpoint_url=props["endpoint"] or None)


class SecurityGroupProbeProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        group_id = _ec2(props).create_security_group(
            GroupName=props["name"], Description="atomic-gang toolchain probe"
        )["GroupId"]
        return CreateResult(id_=group_id, outs={**props, "group_id": group_id})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        keys = ("name", "region", "endpoint")
        changed = [k for k in keys if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=True)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        _ec2(props).delete_security_group(GroupId=_id)


class SecurityGroupProbe(Resource):
    group_id: pulumi.Output[str]

    def __init__(self, name: str, region: str, endpoint: str | None) -> None:
        super().__init__(
            SecurityGroupProbeProvider(),
            name,
            {"name": name, "region": region, "endpoint": endpoint or "", "group_id": None},
        )


def program(region: str, endpoint: str | None) -> Any:
    """The inline program: one probe resource and its id as an output."""

    def run() -> None:
        probe = SecurityGroupProbe("atomic-gang-probe", region, endpoint)
        pulumi.export("groupId", probe.group_id)

    return run
