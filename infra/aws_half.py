"""The bootstrap's AWS half: IAM, EKS access, and the pools' state bucket and key.

Called by `program.build` only when `createAwsResources` is true (the default), so that
with it false nothing here, pulumi_aws included, is imported. Returns what the Helm release
is wired to: the node role, the roles Jobs may name, the stack backend and secrets URLs,
and the resources the release must wait for.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.access import node_access_entry, pod_identity
from infra.config import BootstrapConfig
from infra.iam import ControllerIam, NodeIam, allowed_node_roles, controller_iam, node_iam
from infra.state import StackStateStore, state_store

__all__ = ["AwsHalf", "build_aws_half"]


@dataclass(frozen=True)
class AwsHalf:
    node: NodeIam
    controller: ControllerIam
    access_entry: aws.eks.AccessEntry
    pod_identity: aws.eks.PodIdentityAssociation
    state: StackStateStore
    allowed_node_roles: pulumi.Output[list[str]]

    @property
    def release_depends_on(self) -> list[pulumi.Resource]:
        # A controller pod started before its association exists gets no AWS credentials.
        return [self.pod_identity, self.controller.policy, self.access_entry, self.state.alias]


def _account_id(cfg: BootstrapConfig, provider: aws.Provider) -> pulumi.Output[str]:
    if cfg.account_id:
        return pulumi.Output.from_input(cfg.account_id)
    identity = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(provider=provider))
    return identity.account_id


def build_aws_half(cfg: BootstrapConfig) -> AwsHalf:
    provider = aws.Provider("aws", region=cfg.region)
    on_aws = pulumi.ResourceOptions(provider=provider)

    node = node_iam(cfg, on_aws)
    allowed = allowed_node_roles(cfg, node.role.arn)
    account = _account_id(cfg, provider)
    state = state_store(cfg, account, on_aws)
    controller = controller_iam(cfg, account, allowed, state.bucket.bucket, state.key.arn, on_aws)
    entry = node_access_entry(cfg, node.role.arn, on_aws)
    association = pod_identity(cfg, controller.role.arn, on_aws)
    return AwsHalf(node, controller, entry, association, state, allowed)
