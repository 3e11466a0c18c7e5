"""The bootstrap program: everything one EKS cluster needs before gang Jobs can run.

`pulumi up` at the repository root runs `infra/__main__.py`, which calls `main()`; the tests
call `build()` under Pulumi's mocks with a `BootstrapConfig` they write. Resources, in
dependency order: the node role, its worker policies and convention-named instance
profile, the node role's EC2_LINUX access entry, the controller role with its
least-privilege policy and Pod Identity association, the Kueue objects, the S3 bucket and
KMS key of the pools' stacks, and the Helm release of the chart.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
from pulumi_kubernetes.helm.v3 import Release

from infra.access import node_access_entry, pod_identity
from infra.config import BootstrapConfig, load_config
from infra.iam import ControllerIam, NodeIam, allowed_node_roles, controller_iam, node_iam
from infra.kueue import KueueObjects, kueue_objects
from infra.release import chart_values, helm_release
from infra.state import StackStateStore, state_store

__all__ = ["Bootstrap", "build", "main"]


@dataclass(frozen=True)
class Bootstrap:
    node: NodeIam
    controller: ControllerIam
    access_entry: aws.eks.AccessEntry
    pod_identity: aws.eks.PodIdentityAssociation
    kueue: KueueObjects
    state: StackStateStore
    release: Release


def _account_id(cfg: BootstrapConfig, provider: aws.Provider) -> pulumi.Output[str]:
    if cfg.account_id:
        return pulumi.Output.from_input(cfg.account_id)
    identity = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(provider=provider))
    return identity.account_id


def build(cfg: BootstrapConfig) -> Bootstrap:
    provider = aws.Provider("aws", region=cfg.region)
    on_aws = pulumi.ResourceOptions(provider=provider)

    node = node_iam(cfg, on_aws)
    allowed = allowed_node_roles(cfg, node.role.arn)
    account = _account_id(cfg, provider)
    state = state_store(cfg, account, on_aws)
    controller = controller_iam(cfg, account, allowed, state.bucket.bucket, state.key.arn, on_aws)
    entry = node_access_entry(cfg, node.role.arn, on_aws)
    association = pod_identity(cfg, controller.role.arn, on_aws)
    queues = kueue_objects(cfg, pulumi.ResourceOptions())
    release = helm_release(
        cfg,
        chart_values(cfg, node.role.arn, allowed, state.backend_url, state.secrets_provider),
        pulumi.ResourceOptions(depends_on=[association, controller.policy, entry, state.alias]),
    )
    return Bootstrap(node, controller, entry, association, queues, state, release)


def main() -> None:
    cfg = load_config()
    made = build(cfg)
    pulumi.export("controllerRoleArn", made.controller.role.arn)
    pulumi.export("controllerPolicy", made.controller.policy_document)
    pulumi.export("nodeRoleArn", made.node.role.arn)
    pulumi.export("instanceProfileName", made.node.instance_profile.name)
    pulumi.export("admissionCheck", cfg.admission_check_name)
    pulumi.export("queueName", cfg.queue_name)
    pulumi.export("releaseNamespace", cfg.controller_namespace)
    pulumi.export("stackBackendUrl", made.state.backend_url)
    pulumi.export("stackSecretsProvider", made.state.secrets_provider)
