"""IAM for one cluster: the controller's role and policy, the gang nodes' role and profile.

Called by `program.build`. Every document comes from `provisioner.cloud.iam_policy`, the one
source the controller's docs and tests use too; this module only turns them into
pulumi-aws resources.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.config import BootstrapConfig
from provisioner.cloud.iam_policy import (
    StackState,
    controller_policy,
    node_role_policy_arns,
    node_role_trust_policy,
    pod_identity_trust_policy,
)
from provisioner.cloud.naming import instance_profile_name

__all__ = ["ControllerIam", "NodeIam", "controller_iam", "node_iam"]

_TAGS = {"atomic-gang.k8s.aws/bootstrap": "true"}


@dataclass(frozen=True)
class NodeIam:
    role: aws.iam.Role
    attachments: tuple[aws.iam.RolePolicyAttachment, ...]
    instance_profile: aws.iam.InstanceProfile


@dataclass(frozen=True)
class ControllerIam:
    role: aws.iam.Role
    policy: aws.iam.RolePolicy
    policy_document: pulumi.Output[str]


def node_iam(cfg: BootstrapConfig, opts: pulumi.ResourceOptions) -> NodeIam:
    """The gang nodes' role with the EKS worker policies, and the instance profile named
    by the convention the controller looks it up by."""
    role = aws.iam.Role(
        "node-role",
        name=cfg.node_role,
        description=f"Gang nodes of EKS cluster {cfg.cluster_name} (atomic-gang-provisioner)",
        assume_role_policy=json.dumps(node_role_trust_policy()),
        tags=_TAGS,
        opts=opts,
    )
    attachments = tuple(
        aws.iam.RolePolicyAttachment(
            f"node-role-{arn.rsplit('/', 1)[-1]}",
            role=role.name,
            policy_arn=arn,
            opts=opts,
        )
        for arn in node_role_policy_arns(cfg.region, ssm=cfg.node_role_ssm)
    )
    profile = aws.iam.InstanceProfile(
        "node-instance-profile",
        name=instance_profile_name(cfg.cluster_name, cfg.node_role),
        role=role.name,
        tags=_TAGS,
        opts=opts,
    )
    return NodeIam(role, attachments, profile)


def allowed_node_roles(
    cfg: BootstrapConfig, node_role_arn: pulumi.Input[str]
) -> pulumi.Output[list[str]]:
    """The node roles Jobs may name: the bootstrap's own, then the configured extras."""
    return pulumi.Output.from_input(node_role_arn).apply(cfg.allowed_node_roles)


def controller_iam(
    cfg: BootstrapConfig,
    account_id: pulumi.Input[str],
    node_role_arns: pulumi.Input[list[str]],
    state_bucket: pulumi.Input[str],
    state_key_arn: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> ControllerIam:
    """The controller's role, trusted by EKS Pod Identity, with its least-privilege policy
    (which reaches the stacks' state bucket and key, and no other)."""
    role = aws.iam.Role(
        "controller-role",
        name=cfg.controller_role,
        description=f"atomic-gang-provisioner controller of EKS cluster {cfg.cluster_name}",
        assume_role_policy=json.dumps(pod_identity_trust_policy()),
        tags=_TAGS,
        opts=opts,
    )

    def render(args: list[Any]) -> str:
        account, roles, bucket, key_arn = args
        return json.dumps(
            controller_policy(
                account_id=account,
                region=cfg.region,
                node_role_arns=roles,
                cluster_name=cfg.cluster_name,
                self_manage_instance_profile=cfg.self_manage_instance_profile,
                manage_access_entry=cfg.manage_access_entry,
                state=StackState(bucket, key_arn),
            ),
            indent=2,
        )

    document = pulumi.Output.all(account_id, node_role_arns, state_bucket, state_key_arn).apply(
        render
    )
    policy = aws.iam.RolePolicy(
        "controller-policy",
        name="atomic-gang-controller",
        role=role.id,
        policy=document,
        opts=opts,
    )
    return ControllerIam(role, policy, document)
