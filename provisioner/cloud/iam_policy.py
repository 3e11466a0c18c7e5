"""The controller's IAM: its least-privilege policy, its trust policies, the node role's
managed policies. The one source of all of them.

Used by the bootstrap program (`infra/`), by `python -m provisioner.cloud.iam_policy`
(whose output the README shows) and by the tests that pin each condition. Pure: builds
JSON-ready dicts, imports no AWS SDK.

The policy is the reference controller's, statement for statement, plus what this
controller's own code calls that the reference did not: placement groups (the pool stack's
optional cluster placement group), and `eks:CreateAccessEntry` when the controller manages
the node role's access entry. It names one cluster: every mutating EC2 call is conditioned
on `atomic-gang.k8s.aws/managed=true` and `atomic-gang.k8s.aws/cluster=<cluster>` (request
tags on create, resource tags on change and delete), tagging is allowed at creation and
otherwise only for the keep-warm key on this cluster's instances, ENIs are deleted only when
the VPC CNI tagged them for this cluster, and `ssm:GetParameter` reaches only the
EKS-optimized AMI parameters. `iam:PassRole` reaches only the allowed node roles, and only
towards EC2. The emulator evaluates this document on the controller's calls
(`devenv.emulator.authorization`), and the unit tests evaluate it case by case.

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
# The tag the VPC CNI puts on the ENIs it creates for pods, naming the cluster (its
# CLUSTER_NAME setting, which the EKS add-on sets): the controller deletes only those.
VPC_CNI_CLUSTER_TAG: Final = "cluster.k8s.amazonaws.com/name"
# The SSM parameters the controller reads the EKS-optimized AMI from (`cloud.ami`).
EKS_AMI_PARAMETERS: Final = "/aws/service/eks/optimized-ami/*"
# The calls that tag what they create (their TagSpecifications), for ec2:CreateAction.
TAGGING_CREATE_ACTIONS: Final = (
    "RunInstances",
    "CreateFleet",
    "CreateLaunchTemplate",
    "CreatePlacementGroup",
)
# What the controller ever writes with CreateTags on an existing instance: the keep-warm
# deadline. Ownership tags (managed, cluster, pool, group) are written at creation only.
RETAGGABLE_KEYS: Final = (c.TAG_KEEP_WARM_UNTIL,)
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
    # Who owns a Job's own AMI (amiPolicy, `cloud.images`). Read-only.
    "ec2:DescribeImages",
)
# Calls on an existing launch template: only on one tagged for this cluster.
_LAUNCH_TEMPLATE_CHANGES: Final = (
    "ec2:CreateLaunchTemplateVersion",
    "ec2:ModifyLaunchTemplate",
    "ec2:DeleteLaunchTemplate",
    "ec2:DeleteLaunchTemplateVersions",
)
_SELF_MANAGED_PROFILE: Final = (
    "iam:CreateInstanceProfile",
    "iam:AddRoleToInstanceProfile",
    "iam:GetInstanceProfile",
    # CreateInstanceProfile with Tags (the controller's own and `instances.extraTags`) is
    # also authorized as iam:TagInstanceProfile ("Tagging IAM resources", IAM User Guide);
    # scoped, like the rest, to the exact profiles.
    "iam:TagInstanceProfile",
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
# EKS cluster names: 1-100 of letters, digits, hyphens and underscores, starting alphanumeric.
_CLUSTER: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")


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


def _request_tags(cluster: str) -> Policy:
    """What a create must tag its new resource with: managed, and this cluster."""
    return {
        "StringEquals": {
            f"aws:RequestTag/{c.TAG_MANAGED}": "true",
            f"aws:RequestTag/{c.TAG_CLUSTER}": cluster,
        }
    }


def _resource_tags(cluster: str) -> Policy:
    """What an existing resource must carry to be touched: managed, and this cluster."""
    return {
        "StringEquals": {
            f"aws:ResourceTag/{c.TAG_MANAGED}": "true",
            f"aws:ResourceTag/{c.TAG_CLUSTER}": cluster,
        }
    }


def controller_policy(
    *,
    account_id: str,
    region: str,
    node_role_arns: Sequence[str],
    cluster_name: str,
    self_manage_instance_profile: bool = False,
    manage_access_entry: bool = False,
    state: StackState | None = None,
) -> Policy:
    """The controller role's least-privilege policy document, scoped to `cluster_name`.

    Every mutating EC2 call is conditioned on this cluster's tags (IAM User Guide, "Actions,
    resources, and condition keys for Amazon EC2"): `aws:RequestTag` on what a call creates,
    `aws:ResourceTag` on what it changes or deletes. Tagging is allowed at creation only
    (`ec2:CreateAction`, "Grant permission to tag Amazon EC2 resources during creation"),
    and afterwards only the keep-warm deadline, only on instances already tagged managed for
    this cluster (`aws:TagKeys`), so no call can move an instance into this cluster, another
    pool, or out of another cluster. The patterns are those of "Example policies for working
    with the Amazon EC2 API" (launch with tags, work with instances by tag).

    `node_role_arns` is `allowedNodeRoleArns` (or just `defaults.nodeRoleArn`); the two
    `iam.*` switches add what the controller then creates itself, scoped to the exact
    instance profiles and to the cluster. The installer's extra tags (`instances.extraTags`)
    need nothing more: the conditions pin this cluster's two keys with StringEquals on
    `aws:RequestTag/<key>` and never bound `aws:TagKeys` at creation, so a request that
    also carries CostCenter or team tags still matches them. `state` is the stacks' S3
    bucket and KMS key; without it (a `file://` backend) nothing is granted on S3 or KMS.
    """
    _check_inputs(account_id, region, node_role_arns)
    if not _CLUSTER.match(cluster_name or ""):
        raise ValueError(
            f"cluster_name {cluster_name!r} is not an EKS cluster name: the policy is scoped "
            "to one cluster's tags (set --cluster-name / clusterName)"
        )
    part = partition_of(region)
    ec2 = f"arn:{part}:ec2:{region}:{account_id}"
    roles = sorted(dict.fromkeys(node_role_arns))
    mine = _resource_tags(cluster_name)
    statements = [
        # A launch is authorized per resource: what it creates must carry this cluster's
        # tags, while what it only references (image, subnet, security groups, template, ...)
        # has no request tags, so one tag-conditioned statement over "*" would deny every
        # launch.
        _statement(
            "LaunchGang",
            ("ec2:RunInstances", "ec2:CreateFleet"),
            [f"{ec2}:{kind}/*" for kind in _LAUNCH_CREATES],
            Condition=_request_tags(cluster_name),
        ),
        # An instant fleet's request can tag only the fleet and its instances (CreateFleet,
        # TagSpecifications); its volumes and ENIs take their tags from the launch template,
        # which the pages do not say count as request tags. They exist only with an instance
        # the statement above scopes, launched from a template the one below scopes.
        _statement(
            "LaunchGangFleetVolumesAndInterfaces",
            "ec2:CreateFleet",
            [f"{ec2}:{kind}/*" for kind in ("volume", "network-interface")],
        ),
        _statement(
            "LaunchGangReferencedResources",
            ("ec2:RunInstances", "ec2:CreateFleet"),
            [
                f"arn:{part}:ec2:{region}:{'' if kind == 'image' else account_id}:{kind}/*"
                for kind in _LAUNCH_REFERENCES
            ],
        ),
        # A launch from a template runs what the template says (AMI, user data, profile):
        # only this cluster's templates, as the pool stack makes them.
        _statement(
            "LaunchFromThisClustersTemplates",
            ("ec2:RunInstances", "ec2:CreateFleet"),
            f"{ec2}:launch-template/*",
            Condition=mine,
        ),
        # The tags a create call applies are authorized as ec2:CreateTags with
        # ec2:CreateAction set; without that key (a CreateTags call of its own) this
        # statement does not apply.
        _statement(
            "TagOnlyWhatThisClusterCreates",
            "ec2:CreateTags",
            [
                f"{ec2}:{kind}/*"
                for kind in (*_LAUNCH_CREATES, "launch-template", "placement-group")
            ],
            Condition={
                "StringEquals": {
                    "ec2:CreateAction": list(TAGGING_CREATE_ACTIONS),
                    **_request_tags(cluster_name)["StringEquals"],
                }
            },
        ),
        # The keep-warm tag move: on this cluster's gang instances only, and only the
        # keep-warm key (ForAllValues over the request's keys; Null refuses a request that
        # names no key, for which ForAllValues alone would be true).
        _statement(
            "MoveKeepWarmTagOnThisClustersGangs",
            "ec2:CreateTags",
            f"{ec2}:instance/*",
            Condition={
                **mine,
                "ForAllValues:StringEquals": {"aws:TagKeys": list(RETAGGABLE_KEYS)},
                "Null": {"aws:TagKeys": "false"},
            },
        ),
        _statement(
            "ReleaseThisClustersGangs",
            ("ec2:TerminateInstances", "ec2:DeleteFleets"),
            [f"{ec2}:instance/*", f"{ec2}:fleet/*"],
            Condition=mine,
        ),
        _statement("DescribeForReconcile", _DESCRIBE, "*"),
        _statement(
            "DeleteThisClustersVPCCNIInterfaces",
            "ec2:DeleteNetworkInterface",
            f"{ec2}:network-interface/*",
            Condition={"StringEquals": {f"aws:ResourceTag/{VPC_CNI_CLUSTER_TAG}": cluster_name}},
        ),
        _statement(
            "CreateThisClustersLaunchTemplates",
            "ec2:CreateLaunchTemplate",
            f"{ec2}:launch-template/*",
            Condition=_request_tags(cluster_name),
        ),
        _statement(
            "ChangeThisClustersLaunchTemplates",
            _LAUNCH_TEMPLATE_CHANGES,
            f"{ec2}:launch-template/*",
            Condition=mine,
        ),
        _statement(
            "CreateThisClustersPlacementGroups",
            "ec2:CreatePlacementGroup",
            f"{ec2}:placement-group/*",
            Condition=_request_tags(cluster_name),
        ),
        _statement(
            "DeleteThisClustersPlacementGroups",
            "ec2:DeletePlacementGroup",
            f"{ec2}:placement-group/*",
            Condition=mine,
        ),
        _statement("VerifyNodeInstanceProfile", "iam:GetInstanceProfile", "*"),
        _statement(
            "PassNodeRoleToEC2Only",
            "iam:PassRole",
            roles,
            Condition={"StringEquals": {"iam:PassedToService": EC2_PRINCIPAL}},
        ),
        _statement(
            "ResolveThisCluster",
            ("eks:DescribeCluster", "eks:DescribeAccessEntry"),
            [
                f"arn:{part}:eks:{region}:{account_id}:cluster/{cluster_name}",
                f"arn:{part}:eks:{region}:{account_id}:access-entry/{cluster_name}/*",
            ],
        ),
        # AWS's public parameters have no account in their ARN.
        _statement(
            "ReadEKSOptimizedAMIParameters",
            "ssm:GetParameter",
            f"arn:{part}:ssm:{region}::parameter{EKS_AMI_PARAMETERS}",
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
    parser.add_argument(
        "--cluster-name",
        required=True,
        help="the EKS cluster (clusterName): every EC2 grant is scoped to its tags",
    )
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
