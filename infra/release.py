"""The Helm release of `charts/atomic-gang-provisioner`, wired to what the bootstrap made.

Called by `program.build`. The chart's own Kueue objects are switched off (the bootstrap
creates them, see `kueue`), auth is Pod Identity through the association the bootstrap
creates, and the release waits for that association: a pod started before it exists gets
no AWS credentials.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
from pulumi_kubernetes.helm.v3 import Release

from infra.config import BootstrapConfig

__all__ = ["CHART_PATH", "chart_values", "helm_release"]

CHART_PATH = Path(__file__).resolve().parent.parent / "charts" / "atomic-gang-provisioner"


def chart_values(
    cfg: BootstrapConfig,
    node_role_arn: pulumi.Input[str],
    allowed_node_role_arns: pulumi.Input[list[str]],
    backend_url: pulumi.Input[str],
    secrets_provider: pulumi.Input[str],
) -> dict[str, Any]:
    return {
        "clusterName": cfg.cluster_name,
        "defaults": {"region": cfg.region, "nodeRoleArn": node_role_arn},
        "allowedNodeRoleArns": allowed_node_role_arns,
        "auth": {"mode": "podIdentity"},
        "serviceAccount": {"create": True, "name": cfg.service_account},
        "image": {"repository": cfg.image_repository, "tag": cfg.image_tag},
        "webhook": {"certMode": cfg.webhook_cert_mode},
        "pulumi": {"backendUrl": backend_url, "secretsProvider": secrets_provider},
        "iam": {
            "selfManageInstanceProfile": cfg.self_manage_instance_profile,
            "manageAccessEntry": cfg.manage_access_entry,
        },
        "kueue": {
            "create": {
                "admissionCheck": False,
                "resourceFlavor": False,
                "clusterQueue": False,
                "localQueues": False,
            },
            "admissionCheckName": cfg.admission_check_name,
            "queueName": cfg.queue_name,
        },
    }


def helm_release(
    cfg: BootstrapConfig,
    values: dict[str, Any],
    opts: pulumi.ResourceOptions,
) -> Release:
    return Release(
        "controller",
        name=cfg.release_name,
        chart=str(CHART_PATH),
        namespace=cfg.controller_namespace,
        create_namespace=True,
        values=values,
        # Wait for the Deployment to be Ready, so `pulumi up` fails if the controller cannot
        # start rather than reporting success over a crash loop.
        skip_await=False,
        timeout=600,
        opts=opts,
    )
