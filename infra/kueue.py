"""Kueue objects for the gang queue: AdmissionCheck, ResourceFlavor, ClusterQueue and one
LocalQueue per namespace, created against the cluster's existing Kueue (v1beta2).

Called by `program.build`. The objects are the product's (`provisioner.api.kueue_objects`,
the one source the chart test checks the chart against). The ClusterQueue names the
AdmissionCheck and the flavor through their resources' outputs, so Pulumi creates them in
order and a rename cannot leave the queue pointing at nothing.

Each is deleted with background propagation (`DELETE_IN_BACKGROUND`). Pulumi's Kubernetes
provider deletes with foreground propagation unless told otherwise: the apiserver then
keeps the object, under a `foregroundDeletion` finalizer, until the garbage collector of
kube-controller-manager has deleted its dependents and removed that finalizer, and the
provider waits for the object to be gone. These objects own nothing, so background deletes
exactly the same without depending on a garbage collector: the embedded default runs none,
and there `pulumi destroy` waited on the first LocalQueue (deletionTimestamp set,
finalizers `[foregroundDeletion]`, no Kueue finalizer: Kueue 0.19 puts none on a
LocalQueue) until it was stopped. The finalizers that matter are Kueue's own
(`kueue.x-k8s.io/resource-in-use` on the ClusterQueue, the flavor and the check), which the
provider still waits for: Kueue removes them once no Workload holds quota in the queue and
no ClusterQueue names the flavor or check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource

from infra.config import BootstrapConfig
from provisioner.api import kueue_objects as ko

__all__ = ["DELETE_IN_BACKGROUND", "KueueObjects", "kueue_objects"]

# pulumi-kubernetes' per-object deletion propagation policy (default: foreground).
DELETE_IN_BACKGROUND = {"pulumi.com/deletionPropagationPolicy": "background"}


@dataclass(frozen=True)
class KueueObjects:
    admission_check: CustomResource
    resource_flavor: CustomResource
    cluster_queue: CustomResource
    local_queues: tuple[CustomResource, ...]


def _resource(
    resource_name: str, obj: Mapping[str, Any], opts: pulumi.ResourceOptions
) -> CustomResource:
    """A product builder's object as a Pulumi resource."""
    metadata = dict(obj["metadata"])
    metadata["annotations"] = {**metadata.get("annotations", {}), **DELETE_IN_BACKGROUND}
    return CustomResource(
        resource_name,
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        metadata=metadata,
        spec=obj["spec"],
        opts=opts,
    )


def _name(resource: CustomResource) -> pulumi.Output[str]:
    """The object's name as an output of the resource, so users of it wait for it."""
    # A CustomResource's outputs are set on it when registered, without typed attributes.
    metadata: pulumi.Output[Any] = resource.metadata  # type: ignore[attr-defined]
    return metadata.apply(lambda meta: str(meta["name"]))


def kueue_objects(cfg: BootstrapConfig, opts: pulumi.ResourceOptions) -> KueueObjects:
    # Naming the GangClass the Helm release creates (the chart's `kueue.gangClass`): until it
    # exists the check is only not Active yet.
    check = _resource(
        "admission-check", ko.admission_check(cfg.admission_check_name, ko.CLASS_NAME), opts
    )
    flavor = _resource("resource-flavor", ko.resource_flavor(cfg.resource_flavor_name), opts)
    queue = _resource(
        "cluster-queue",
        ko.cluster_queue(cfg.cluster_queue_name, _name(flavor), _name(check), cfg.quotas),
        opts,
    )
    local_queues = tuple(
        _resource(
            f"local-queue-{namespace}",
            ko.local_queue(namespace, cfg.queue_name, _name(queue)),
            opts,
        )
        for namespace in cfg.local_queue_namespaces
    )
    return KueueObjects(check, flavor, queue, local_queues)
