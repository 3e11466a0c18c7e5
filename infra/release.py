"""The Helm release of `charts/atomic-gang-provisioner`, wired to what the bootstrap made.

Called by `program.build`. The chart's own Kueue objects are switched off (the bootstrap
creates them, see `kueue`), auth is Pod Identity through the association the bootstrap
creates, and the release waits for that association: a pod started before it exists gets
no AWS credentials. `chartValues` adds values the bootstrap does not set itself, and may
not change one it does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
from pulumi_kubernetes.helm.v3 import Release

from infra.config import BootstrapConfig, ConfigError
from provisioner.api import kueue_objects as ko

__all__ = ["CHART_PATH", "chart_values", "helm_release"]

CHART_PATH = Path(__file__).resolve().parent.parent / "charts" / "atomic-gang-provisioner"


def chart_values(
    cfg: BootstrapConfig,
    node_role_arn: pulumi.Input[str],
    allowed_node_role_arns: pulumi.Input[list[str]],
    backend_url: pulumi.Input[str],
    secrets_provider: pulumi.Input[str],
) -> dict[str, Any]:
    wired: dict[str, Any] = {
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
            # The chart creates the class the bootstrap's AdmissionCheck names.
            "gangClassName": ko.CLASS_NAME,
            "queueName": cfg.queue_name,
        },
    }
    return _merged(wired, cfg.chart_values, "chartValues")


def _merged(wired: Mapping[str, Any], extra: Mapping[str, Any], path: str) -> dict[str, Any]:
    """`extra` merged into `wired`; a value the bootstrap wires itself (the queue names, the
    node role, the backend...) is refused rather than silently replaced or overridden."""
    out = dict(wired)
    for key, value in extra.items():
        where = f"{path}.{key}"
        if key not in out:
            out[key] = value
        elif isinstance(out[key], Mapping) and isinstance(value, Mapping):
            out[key] = _merged(out[key], value, where)
        else:
            raise ConfigError(
                f"{where} is set by the bootstrap itself (from its own keys or resources); "
                "chartValues may only add values"
            )
    return out


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
        # start rather than reporting success over a crash loop; `waitForController=false`
        # for a cluster that cannot run it yet (no nodes).
        skip_await=not cfg.wait_for_controller,
        timeout=600,
        opts=opts,
    )
