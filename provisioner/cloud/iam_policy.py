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

The statements come per service: EC2 (`iam_ec2`), the stacks' S3 and KMS (`iam_state`),
the trust policies and the node role's managed policies (`iam_trust`); the IAM, EKS and SSM
grants, and the assembly, are here. Every name callers use is importable from here.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from typing import Final

from provisioner.cloud.iam_document import VERSION, Policy, partition_of, statement
from provisioner.cloud.iam_ec2 import (
    DEFAULT_IMAGE_OWNERS,
    RETAGGABLE_KEYS,
    TAGGING_CREATE_ACTIONS,
    VPC_CNI_CLUSTER_TAG,
    ec2_statements,
    purchase_statements,
)
from provisioner.cloud.iam_state import StackState, state_statements
from provisioner.cloud.iam_trust import (
    EC2_PRINCIPAL,
    NODE_ROLE_POLICY_NAMES,
    POD_IDENTITY_PRINCIPAL,
    irsa_trust_policy,
    node_role_policy_arns,
    node_role_trust_policy,
    pod_identity_trust_policy,
)
from provisioner.cloud.naming import instance_profile_name, role_name_from_arn

__all__ = [
    "ACCESS_ENTRY_TYPE",
    "DEFAULT_IMAGE_OWNERS",
    "EC2_PRINCIPAL",
    "EKS_AMI_PARAMETERS",
    "NODE_ROLE_POLICY_NAMES",
    "POD_IDENTITY_PRINCIPAL",
    "RETAGGABLE_KEYS",
    "TAGGING_CREATE_ACTIONS",
    "VPC_CNI_CLUSTER_TAG",
    "Policy",
    "StackState",
    "controller_policy",
    "irsa_trust_policy",
    "main",
    "node_role_policy_arns",
    "node_role_trust_policy",
    "partition_of",
    "pod_identity_trust_policy",
]

# The access entry type of the node roles' entries (`stacks.access_entry`).
ACCESS_ENTRY_TYPE: Final = "EC2_LINUX"
# The SSM parameters the controller reads the EKS-optimized AMI from (`cloud.ami`).
EKS_AMI_PARAMETERS: Final = "/aws/service/eks/optimized-ami/*"
_SELF_MANAGED_PROFILE: Final = (
    "iam:CreateInstanceProfile",
    "iam:AddRoleToInstanceProfile",
    "iam:GetInstanceProfile",
    # CreateInstanceProfile with Tags (the controller's own and `instances.extraTags`) is
    # also authorized as iam:TagInstanceProfile ("Tagging IAM resources", IAM User Guide);
    # scoped, like the rest, to the exact profiles.
    "iam:TagInstanceProfile",
)
_ACCOUNT: Final = re.compile(r"^\d{12}$")
_REGION: Final = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
# EKS cluster names: 1-100 of letters, digits, hyphens and underscores, starting alphanumeric.
_CLUSTER: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")


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
    cluster_name: str,
    self_manage_instance_profile: bool = False,
    manage_access_entry: bool = False,
    state: StackState | None = None,
    image_owners: Sequence[str] = DEFAULT_IMAGE_OWNERS,
    image_ids: Sequence[str] = (),
    buy_capacity_blocks: bool = False,
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

    Launches (RunInstances, CreateFleet) are allowed only from this cluster's launch
    templates (`ec2:LaunchTemplate`, and the template's own tags), with images of
    `image_owners` or listed in `image_ids` (amiPolicy's `allowedOwners` and
    `allowedImageIds`, `ec2:Owner`), and into capacity reservations tagged
    `atomic-gang.k8s.aws/cluster=<cluster>` only. The node access entry the controller
    creates is the node roles' and of type EC2_LINUX only.

    `buy_capacity_blocks` (the installer's `blockPurchase.enabled`) adds
    ec2:PurchaseCapacityBlock, only for a block tagged at purchase as this cluster's
    (`aws:RequestTag`), and the tags of that purchase (`ec2:CreateAction`); without it the
    controller can list offerings and never buy one.
    """
    _check_inputs(account_id, region, node_role_arns)
    if not _CLUSTER.match(cluster_name or ""):
        raise ValueError(
            f"cluster_name {cluster_name!r} is not an EKS cluster name: the policy is scoped "
            "to one cluster's tags (set --cluster-name / clusterName)"
        )
    part = partition_of(region)
    roles = sorted(dict.fromkeys(node_role_arns))
    statements = [
        *ec2_statements(part, region, account_id, cluster_name, image_owners, image_ids),
        statement("VerifyNodeInstanceProfile", "iam:GetInstanceProfile", "*"),
        statement(
            "PassNodeRoleToEC2Only",
            "iam:PassRole",
            roles,
            Condition={"StringEquals": {"iam:PassedToService": EC2_PRINCIPAL}},
        ),
        statement(
            "ResolveThisCluster",
            ("eks:DescribeCluster", "eks:DescribeAccessEntry"),
            [
                f"arn:{part}:eks:{region}:{account_id}:cluster/{cluster_name}",
                f"arn:{part}:eks:{region}:{account_id}:access-entry/{cluster_name}/*",
            ],
        ),
        # AWS's public parameters have no account in their ARN.
        statement(
            "ReadEKSOptimizedAMIParameters",
            "ssm:GetParameter",
            f"arn:{part}:ssm:{region}::parameter{EKS_AMI_PARAMETERS}",
        ),
    ]
    if buy_capacity_blocks:
        statements.extend(purchase_statements(part, region, account_id, cluster_name))
    if self_manage_instance_profile:
        profiles = sorted(
            f"arn:{part}:iam::{account_id}:instance-profile/"
            + instance_profile_name(cluster_name, role_name_from_arn(arn))
            for arn in roles
        )
        statements.append(
            statement("SelfManageNodeInstanceProfile", _SELF_MANAGED_PROFILE, profiles)
        )
    if manage_access_entry:
        statements.append(
            statement(
                "ManageNodeAccessEntry",
                "eks:CreateAccessEntry",
                f"arn:{part}:eks:{region}:{account_id}:cluster/{cluster_name}",
                # Only the node roles' entries, and only as EC2 Linux nodes: an entry of
                # type STANDARD could map any principal to any Kubernetes group.
                Condition={
                    "ArnEquals": {"eks:principalArn": roles},
                    "StringEquals": {"eks:accessEntryType": ACCESS_ENTRY_TYPE},
                },
            )
        )
    if state is not None:
        statements.extend(state_statements(part, state))
    return {"Version": VERSION, "Statement": statements}


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
    parser.add_argument(
        "--buy-capacity-blocks",
        action="store_true",
        help="grant ec2:PurchaseCapacityBlock for blocks tagged for this cluster "
        "(blockPurchase.enabled)",
    )
    parser.add_argument(
        "--image-owner",
        action="append",
        default=None,
        help="an owner launches may use images of (amiPolicy.allowedOwners; repeat; "
        f"default: {', '.join(DEFAULT_IMAGE_OWNERS)})",
    )
    parser.add_argument(
        "--image-id", action="append", default=[], help="an allowed image id (allowedImageIds)"
    )
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
            image_owners=args.image_owner or DEFAULT_IMAGE_OWNERS,
            image_ids=args.image_id,
            buy_capacity_blocks=args.buy_capacity_blocks,
        )
    except ValueError as err:
        parser.error(str(err))
    json.dump(policy, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
