"""Checks that a node could join before anything is launched: profile and access entry.

Called by the GangNodePool reconciler (through ``Ec2Engine.verify_node_identity``) once per
pool before its first acquisition. A launch whose nodes cannot register would bill for the
whole join deadline and then fail; this turns that into an immediate CONFIG error naming
the missing piece.
"""

from __future__ import annotations

from provisioner.cloud.ec2api import EksApi, IamApi
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
from provisioner.cloud.types import InstanceProfileRef

_ACCESS_ENTRY_TYPE = "EC2_LINUX"


def verify_instance_profile(iam: IamApi, name: str, role_arn: str) -> InstanceProfileRef:
    """The profile, with its ARN, if it exists and holds ``role_arn``; else CONFIG."""
    try:
        profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    except Exception as exc:
        raise to_cloud_error(exc, f"GetInstanceProfile {name}") from exc
    roles = [str(r.get("Arn", "")) for r in profile.get("Roles") or ()]
    if role_arn not in roles:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "InstanceProfileRoleMismatch",
            f"Instance profile {name} holds {roles or 'no role'}, not the node role "
            f"{role_arn}; add the role to the profile (an instance profile holds one role).",
        )
    return InstanceProfileRef(name=name, arn=profile.get("Arn"))


def verify_access_entry(eks: EksApi, cluster: str, role_arn: str) -> None:
    """CONFIG unless the node role has an EC2_LINUX access entry on the cluster."""
    try:
        entry = eks.describe_access_entry(clusterName=cluster, principalArn=role_arn)
    except Exception as exc:
        err = to_cloud_error(exc, f"DescribeAccessEntry {cluster} {role_arn}")
        if err.code == "ResourceNotFoundException":
            raise CloudError(
                ErrorKind.CONFIG,
                err.code,
                "AccessEntryMissing",
                f"Node role {role_arn} has no access entry on cluster {cluster}; create one "
                f"of type {_ACCESS_ENTRY_TYPE} so gang nodes can register.",
            ) from exc
        raise err from exc
    kind = (entry.get("accessEntry") or {}).get("type")
    if kind != _ACCESS_ENTRY_TYPE:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "AccessEntryWrongType",
            f"The access entry of {role_arn} on cluster {cluster} has type {kind}, not "
            f"{_ACCESS_ENTRY_TYPE}; nodes need an {_ACCESS_ENTRY_TYPE} entry to register.",
        )
