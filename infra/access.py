"""EKS access for one cluster: the gang nodes may join, the controller gets its identity.

Called by `program.build`: an EC2_LINUX access entry for the node role (nodeadm-launched
instances register with it) and a Pod Identity association binding the controller's
ServiceAccount to its role.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.config import BootstrapConfig

__all__ = ["node_access_entry", "pod_identity"]

# The access entry type for self-managed Linux nodes: EKS maps it to system:nodes itself.
NODE_ACCESS_ENTRY_TYPE = "EC2_LINUX"


def node_access_entry(
    cfg: BootstrapConfig, node_role_arn: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> aws.eks.AccessEntry:
    return aws.eks.AccessEntry(
        "node-access-entry",
        cluster_name=cfg.cluster_name,
        principal_arn=node_role_arn,
        type=NODE_ACCESS_ENTRY_TYPE,
        opts=opts,
    )


def pod_identity(
    cfg: BootstrapConfig, controller_role_arn: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> aws.eks.PodIdentityAssociation:
    return aws.eks.PodIdentityAssociation(
        "controller-pod-identity",
        cluster_name=cfg.cluster_name,
        namespace=cfg.controller_namespace,
        service_account=cfg.service_account,
        role_arn=controller_role_arn,
        opts=opts,
    )
