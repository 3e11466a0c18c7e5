"""The controller's IAM: its least-privilege policy, its trust policies, the node role's
managed policies. The one source of all of them.

Used by the bootstrap program (`infra/`), by `python -m provisioner.cloud.iam_policy`
(whose output the README shows) and by the tests that pin each condition. Pure: builds
JSON-ready dicts, imports no AWS SDK.

The policy is the reference controller's, statement for statement, plus what this
controller's own code calls that the reference did not: placement groups (the pool stack's
optional cluster placement group), and `eks:CreateAccessEntry` when the controller manages
the node role's access entry. Every mutating EC2 call is tag-conditioned on
`atomic-gang.k8s.aws/managed=true`; `iam:PassRole` reaches only the allowed node roles,
and only towards EC2.

With a `StackState` (the bootstrap's state bucket and key) it also grants what the Pulumi CLI
does on the pools' `s3://` backend and `awskms://` secrets, and nothing more: list the one
bucket, read/write/delete objects under ``<prefix>.pulumi/`` only, and encrypt, decrypt and
make data keys with the one key (the stacks' secrets, and the bucket's SSE-KMS objects).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from provisioner.api import constants as c
from provisioner.cloud.naming import instance_profile_name, role_name_from_arn

__all__ = [
    "NODE_ROLE_POLICY_NAMES",
    "StackState",
    "controller_policy",
    "irsa_trust_policy",
    "node_role_policy_arns",
    "node_role_trust_policy",
    "partition_of",
    "pod_identity_trust_policy",
]

Policy = dict[str, Any]

_VERSION: Final = "2012-10-17"
_MANAGED_REQUEST_TAG: Final = {"StringEquals": {f"aws:RequestTag/{c.TAG_MANAGED}": "true"}}
_MANAGED_RESOURCE_TAG: Final = {"StringEquals": {f"ec2:ResourceTag/{c.TAG_MANAGED}": "true"}}
POD_IDENTITY_PRINCIPAL: Final = "pods.eks.amazonaws.com"
EC2_PRINCIPAL: Final = "ec2.amazonaws.com"

# The EKS worker policies, in the reference's order; SSM is the optional last one.
NODE_ROLE_POLICY_NAMES: Final = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
    "AmazonSSMManagedInstanceCore",
)

_DESCRIBE: Final = (
    "ec2:DescribeInstances",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeFleets",
    "ec2:DescribeFleetInstances",
    "ec2:DescribeSubnets",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:DescribePlacementGroups",
    "ec2:DescribeCapacityReservations",
    # Stamps ownership on launch (TagSpecifications) and moves the keep-warm tag later.
    "ec2:CreateTags",
)
_LAUNCH_TEMPLATES: Final = (
    "ec2:CreateLaunchTemplate",
    "ec2:CreateLaunchTemplateVersion",
    "ec2:ModifyLaunchTemplate",
    "ec2:DeleteLaunchTemplate",
    "ec2:DeleteLaunchTemplateVersions",
)
_SELF_MANAGED_PROFILE: Final = (
    "iam:CreateInstanceProfile",
    "iam:AddRoleToInstanceProfile",
    "iam:GetInstanceProfile",
)
# What the Pulumi CLI (gocloud's s3blob and awskms) calls on a `diy` backend and its key.
# The controller itself lists, reads and deletes only the lock of a stack a failed
# `stack init` left (cloud.statebucket): ListBucket, GetObject, DeleteObject, all here.
_STATE_OBJECTS: Final = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")
_STATE_KEY: Final = ("kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey")
_ACCOUNT: Final = re.compile(r"^\d{12}$")
_BUCKET: Final = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_KEY_ARN: Final = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")


@dataclass(frozen=True)
class StackState:
    """Where the pools' stacks live: ``s3://<bucket>/<prefix>`` with secrets (and the
    bucket's default encryption) under the KMS key ``key_arn``."""

    bucket: str
    key_arn: str
    prefix: str = ""

    def __post_init__(self) -> None:
        if not _BUCKET.match(self.bucket):
            raise ValueError(f"state bucket {self.bucket!r} is not an S3 bucket name")
        if not _KEY_ARN.match(self.key_arn):
            raise ValueError(f"state key {self.key_arn!r} is not a KMS key ARN")

    @property
    def objects(self) -> str:
        """The object keys the CLI writes: everything under ``<prefix>/.pulumi/``."""
        prefix = self.prefix.strip("/")
        return f"{prefix}/.pulumi/*" if prefix else ".pulumi/*"


def _state_statements(part: str, state: StackState) -> list[Policy]:
    bucket = f"arn:{part}:s3:::{state.bucket}"
    return [
        # Unconditioned on s3:prefix, on purpose: S3 answers a HeadObject of a missing key
        # with 404 only to a caller allowed ListBucket, and that check carries no prefix.
        # A 403 there would read to the CLI as a broken backend. The bucket is the state's
        # own, so listing it shows nothing else.
        _statement("ListStackStateBucket", "s3:ListBucket", bucket),
        _statement("ReadWriteStackState", _STATE_OBJECTS, f"{bucket}/{state.objects}"),
        _statement("UseStackStateKey", _STATE_KEY, state.key_arn),
    ]


_REGION: Final = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")


def partition_of(region: str) -> str:
    """The ARN partition a region belongs to (aws, aws-cn, aws-us-gov)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


# Resource types a RunInstances/CreateFleet call creates (tagged at launch) and those it only
# uses. AMIs are owned by AWS or another account, hence no account in their ARN.
_LAUNCH_CREATES = ("instance", "volume", "network-interface", "fleet")
_LAUNCH_REFERENCES = (
    "image",
    "subnet",
    "security-group",
    "launch-template",
    "placement-group",
    "capacity-reservation",
    "key-pair",
)


def _statement(sid: str, actions: Sequence[str] | str, resource: Any, **extra: Any) -> Policy:
    action: Any = actions if isinstance(actions, str) else list(actions)
    return {"Sid": sid, "Effect": "Allow", "Action": action, "Resource": resource, **extra}


def _check_inputs(account_id: str, region: str, node_role_arns: Sequence[str]) -> None:
    if not _ACCOUNT.match(account_id):
        raise ValueError(f"account id {account_id!r} is not 12 digits")
    if not _REGION.match(region):
        raise ValueError(f"region {region!r} is not an AWS region name such as us-east-1")
    if not node_role_arns:
        # An empty PassRole resource list would let no gang launch at all.
        raise ValueError("at least one node role ARN is needed (allowedNodeRoleArns)")
    for arn in node_role_arns:
        role_name_from_arn(arn)


def controller_policy(
    *,
    account_id: str,
    region: str,
    node_role_arns: Sequence[str],
    cluster_name: str = "",
    self_manage_instance_profile: bool = False,
    manage_access_entry: bool = False,
    state: StackState | None = None,
) -> Policy:
    """The controller role's least-privilege policy document.

    `node_role_arns` is `allowedNodeRoleArns` (or just `defaults.nodeRoleArn`); the two
    `iam.*` switches add what the controller then creates itself, scoped to the exact
    instance profiles and to the cluster, which is why they need `cluster_name`. `state` is
    the stacks' S3 bucket and KMS key; without it (a `file://` backend) nothing is granted
    on S3 or KMS.
    """
    _check_inputs(account_id, region, node_role_arns)
    if (self_manage_instance_profile or manage_access_entry) and not cluster_name:
        raise ValueError("cluster_name is needed to scope the instance-profile and EKS grants")
    part = partition_of(region)
    roles = sorted(dict.fromkeys(node_role_arns))
    statements = [
        # A launch is authorized per resource: what it creates must carry the managed tag,
        # while what it only references (image, subnet, security groups, template, ...) has no
        # request tags, so one tag-conditioned statement over "*" would deny every launch.
        _statement(
            "LaunchGang",
            ("ec2:RunInstances", "ec2:CreateFleet"),
            [f"arn:{part}:ec2:{region}:{account_id}:{kind}/*" for kind in _LAUNCH_CREATES],
            Condition=_MANAGED_REQUEST_TAG,
        ),
        _statement(
            "LaunchGangReferencedResources",
            ("ec2:RunInstances", "ec2:CreateFleet"),
            [
                f"arn:{part}:ec2:{region}:{'' if kind == 'image' else account_id}:{kind}/*"
                for kind in _LAUNCH_REFERENCES
            ],
        ),
        _statement(
            "ReleaseGang",
            ("ec2:TerminateInstances", "ec2:DeleteFleets"),
            "*",
            Condition=_MANAGED_RESOURCE_TAG,
        ),
        _statement("DescribeForReconcile", _DESCRIBE, "*"),
        _statement(
            "DeleteDetachedVPCCNIInterfaces",
            "ec2:DeleteNetworkInterface",
            f"arn:{part}:ec2:{region}:{account_id}:network-interface/*",
        ),
        _statement("ManageGangLaunchTemplates", _LAUNCH_TEMPLATES, "*"),
        _statement(
            "CreateGangPlacementGroups",
            "ec2:CreatePlacementGroup",
            "*",
            Condition=_MANAGED_REQUEST_TAG,
        ),
        _statement(
            "DeleteGangPlacementGroups",
            "ec2:DeletePlacementGroup",
            "*",
            Condition=_MANAGED_RESOURCE_TAG,
        ),
        _statement("VerifyNodeInstanceProfile", "iam:GetInstanceProfile", "*"),
        _statement(
            "PassNodeRoleToEC2Only",
            "iam:PassRole",
            roles,
            Condition={"StringEquals": {"iam:PassedToService": EC2_PRINCIPAL}},
        ),
        _statement(
            "ResolveClusterAndAMI",
            ("eks:DescribeCluster", "eks:DescribeAccessEntry", "ssm:GetParameter"),
            "*",
        ),
    ]
    if self_manage_instance_profile:
        profiles = sorted(
            f"arn:{part}:iam::{account_id}:instance-profile/"
            + instance_profile_name(cluster_name, role_name_from_arn(arn))
            for arn in roles
        )
        statements.append(
            _statement("SelfManageNodeInstanceProfile", _SELF_MANAGED_PROFILE, profiles)
        )
    if manage_access_entry:
        statements.append(
            _statement(
                "ManageNodeAccessEntry",
                "eks:CreateAccessEntry",
                f"arn:{part}:eks:{region}:{account_id}:cluster/{cluster_name}",
            )
        )
    if state is not None:
        statements.extend(_state_statements(part, state))
    return {"Version": _VERSION, "Statement": statements}


def pod_identity_trust_policy() -> Policy:
    """Trust for EKS Pod Identity: the agent assumes the role and tags the session."""
    return {
        "Version": _VERSION,
        "Statement": [
            {
                "Sid": "EksPodIdentity",
                "Effect": "Allow",
                "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
            }
        ],
    }


def irsa_trust_policy(oidc_provider_arn: str, namespace: str, service_account: str) -> Policy:
    """Trust for IRSA: only this ServiceAccount's web identity token, for STS."""
    issuer = oidc_provider_arn.split(":oidc-provider/", 1)[-1]
    return {
        "Version": _VERSION,
        "Statement": [
            {
                "Sid": "EksIrsa",
                "Effect": "Allow",
                "Principal": {"Federated": oidc_provider_arn},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {
                        f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                        f"{issuer}:aud": "sts.amazonaws.com",
                    }
                },
            }
        ],
    }


def node_role_trust_policy() -> Policy:
    """Trust for the gang nodes' role: EC2 instances assume it."""
    return {
        "Version": _VERSION,
        "Statement": [
            {
                "Sid": "Ec2Nodes",
                "Effect": "Allow",
                "Principal": {"Service": EC2_PRINCIPAL},
                "Action": "sts:AssumeRole",
            }
        ],
    }


def node_role_policy_arns(region: str, *, ssm: bool = True) -> tuple[str, ...]:
    """The AWS-managed worker policies for the node role (SSM access optional)."""
    names = NODE_ROLE_POLICY_NAMES if ssm else NODE_ROLE_POLICY_NAMES[:-1]
    return tuple(f"arn:{partition_of(region)}:iam::aws:policy/{name}" for name in names)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m provisioner.cloud.iam_policy",
        description="Print the controller role's least-privilege IAM policy as JSON.",
    )
    parser.add_argument("--account", required=True, help="12-digit AWS account id")
    parser.add_argument("--region", required=True, help="the cluster's region")
    parser.add_argument(
        "--node-role-arn",
        action="append",
        required=True,
        help="an allowed node role (repeat for each entry of allowedNodeRoleArns)",
    )
    parser.add_argument("--cluster-name", default="", help="needed by the two switches below")
    parser.add_argument("--self-manage-instance-profile", action="store_true")
    parser.add_argument("--manage-access-entry", action="store_true")
    parser.add_argument("--state-bucket", default="", help="the stacks' S3 bucket (s3:// backend)")
    parser.add_argument("--state-prefix", default="", help="the backend URL's path in the bucket")
    parser.add_argument("--state-key-arn", default="", help="the stacks' KMS key (awskms://)")
    args = parser.parse_args(argv)
    try:
        state = None
        if args.state_bucket or args.state_key_arn:
            state = StackState(args.state_bucket, args.state_key_arn, args.state_prefix)
        policy = controller_policy(
            account_id=args.account,
            region=args.region,
            node_role_arns=args.node_role_arn,
            cluster_name=args.cluster_name,
            self_manage_instance_profile=args.self_manage_instance_profile,
            manage_access_entry=args.manage_access_entry,
            state=state,
        )
    except ValueError as err:
        parser.error(str(err))
    json.dump(policy, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
