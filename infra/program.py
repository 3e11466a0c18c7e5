"""The bootstrap program: everything one EKS cluster needs before gang Jobs can run.

`pulumi up` at the repository root runs `infra/__main__.py`, which calls `main()`; the unit
tests call `build()` under Pulumi's mocks with a `BootstrapConfig` they write, and
`devenv/bootstrap_kubernetes.py` runs `main()` through the real CLI and Kubernetes provider
with `createAwsResources=false`. Resources, in dependency order: the AWS half
(`aws_half`: the node role, its worker policies and convention-named instance profile, the
node role's EC2_LINUX access entry, the controller role with its least-privilege policy and
Pod Identity association, the S3 bucket and KMS key of the pools' stacks), the Kueue
objects, and the Helm release of the chart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi
from pulumi_kubernetes.helm.v3 import Release

from infra.config import BootstrapConfig, load_config
from infra.kueue import KueueObjects, kueue_objects
from infra.release import chart_values, helm_release

if TYPE_CHECKING:
    from infra.aws_half import AwsHalf

__all__ = ["Bootstrap", "build", "main"]


@dataclass(frozen=True)
class Bootstrap:
    kueue: KueueObjects
    release: Release
    aws: AwsHalf | None  # None with createAwsResources=false


def build(cfg: BootstrapConfig) -> Bootstrap:
    queues = kueue_objects(cfg, pulumi.ResourceOptions())
    if not cfg.create_aws_resources:
        # Wired to what the stack configuration names (config.py refuses it without them).
        values = chart_values(
            cfg,
            cfg.node_role_arn,
            cfg.allowed_node_roles(cfg.node_role_arn),
            cfg.stack_backend_url,
            cfg.stack_secrets_provider,
        )
        return Bootstrap(queues, helm_release(cfg, values, pulumi.ResourceOptions()), None)

    from infra.aws_half import build_aws_half  # pulumi_aws only when AWS resources are made

    made = build_aws_half(cfg)
    values = chart_values(
        cfg,
        made.node.role.arn,
        made.allowed_node_roles,
        made.state.backend_url,
        made.state.secrets_provider,
    )
    release = helm_release(cfg, values, pulumi.ResourceOptions(depends_on=made.release_depends_on))
    return Bootstrap(queues, release, made)


def main() -> None:
    cfg = load_config()
    made = build(cfg)
    pulumi.export("admissionCheck", cfg.admission_check_name)
    pulumi.export("queueName", cfg.queue_name)
    pulumi.export("releaseNamespace", cfg.controller_namespace)
    if made.aws is None:
        pulumi.export("nodeRoleArn", cfg.node_role_arn)
        pulumi.export("stackBackendUrl", cfg.stack_backend_url)
        pulumi.export("stackSecretsProvider", cfg.stack_secrets_provider)
        return
    pulumi.export("controllerRoleArn", made.aws.controller.role.arn)
    pulumi.export("controllerPolicy", made.aws.controller.policy_document)
    pulumi.export("nodeRoleArn", made.aws.node.role.arn)
    pulumi.export("instanceProfileName", made.aws.node.instance_profile.name)
    pulumi.export("stackBackendUrl", made.aws.state.backend_url)
    pulumi.export("stackSecretsProvider", made.aws.state.secrets_provider)
