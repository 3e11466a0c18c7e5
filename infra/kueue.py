"""Kueue objects for the gang queue: AdmissionCheck, ResourceFlavor, ClusterQueue and one
LocalQueue per namespace, created against the cluster's existing Kueue (v1beta2).

Called by `program.build`. The ClusterQueue names the AdmissionCheck and the flavor through
their resources' outputs, so Pulumi creates them in order and a rename cannot leave the
queue pointing at nothing. The check is listed for all flavors (no onFlavors): Kueue puts a
check on a Workload only when it covers every flavor of the Workload's ClusterQueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource

from infra.config import BootstrapConfig
from provisioner.api import constants as c

__all__ = ["KueueObjects", "cluster_queue_spec", "kueue_objects"]

API_VERSION = f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}"


@dataclass(frozen=True)
class KueueObjects:
    admission_check: CustomResource
    resource_flavor: CustomResource
    cluster_queue: CustomResource
    local_queues: tuple[CustomResource, ...]


def cluster_queue_spec(
    flavor: pulumi.Input[str], check: pulumi.Input[str], quotas: Mapping[str, str]
) -> dict[str, Any]:
    """One resource group over `quotas`' resources on one flavor, gated by one check."""
    return {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(quotas),
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {"name": name, "nominalQuota": value} for name, value in quotas.items()
                        ],
                    }
                ],
            }
        ],
        "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
    }


def _name(resource: CustomResource) -> pulumi.Output[str]:
    """The object's name as an output of the resource, so users of it wait for it."""
    # A CustomResource's outputs are set on it when registered, without typed attributes.
    metadata: pulumi.Output[Any] = resource.metadata  # type: ignore[attr-defined]
    return metadata.apply(lambda meta: str(meta["name"]))


def kueue_objects(cfg: BootstrapConfig, opts: pulumi.ResourceOptions) -> KueueObjects:
    check = CustomResource(
        "admission-check",
        api_version=API_VERSION,
        kind="AdmissionCheck",
        metadata={"name": cfg.admission_check_name},
        spec={"controllerName": c.CONTROLLER_NAME},
        opts=opts,
    )
    flavor = CustomResource(
        "resource-flavor",
        api_version=API_VERSION,
        kind="ResourceFlavor",
        metadata={"name": cfg.resource_flavor_name},
        spec={},
        opts=opts,
    )
    queue = CustomResource(
        "cluster-queue",
        api_version=API_VERSION,
        kind="ClusterQueue",
        metadata={"name": cfg.cluster_queue_name},
        spec=cluster_queue_spec(_name(flavor), _name(check), cfg.quotas),
        opts=opts,
    )
    local_queues = tuple(
        CustomResource(
            f"local-queue-{namespace}",
            api_version=API_VERSION,
            kind="LocalQueue",
            metadata={"name": cfg.queue_name, "namespace": namespace},
            spec={"clusterQueue": _name(queue)},
            opts=opts,
        )
        for namespace in cfg.local_queue_namespaces
    )
    return KueueObjects(check, flavor, queue, local_queues)
