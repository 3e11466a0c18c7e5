"""A typed view of a core/v1 Node: what the GangNodePool reconciler reads of one.

Only its name, labels (the pool and group labels), `spec.providerID` (which names the EC2
instance), its taints, its allocatable resources and the Ready condition are modelled; the
rest of the body is ignored.
"""

from __future__ import annotations

from pydantic import Field

from provisioner.api.meta import KubeModel, ObjectMeta

__all__ = ["Node", "NodeCondition", "NodeSpec", "NodeStatus", "Taint"]


class NodeCondition(KubeModel):
    """corev1.NodeCondition, as far as Ready is read from it."""

    type: str
    status: str


class Taint(KubeModel):
    """corev1.Taint, as the usable-node check reads it."""

    key: str
    value: str | None = None
    effect: str


class NodeSpec(KubeModel):
    # Go spells it providerID: aws:///us-east-1a/i-0123456789abcdef0 on EKS.
    provider_id: str | None = Field(default=None, alias="providerID")
    # None when the Node has none: a label write (a diff of the model) must never carry a
    # `taints: []` that would remove a taint added since the read.
    taints: tuple[Taint, ...] | None = None


class NodeStatus(KubeModel):
    conditions: tuple[NodeCondition, ...] = ()
    # Resource name to quantity, as the kubelet reports it (device plugins add theirs);
    # None when the Node reports none yet.
    allocatable: dict[str, str | int] | None = None


class Node(KubeModel):
    metadata: ObjectMeta
    spec: NodeSpec = NodeSpec()
    status: NodeStatus = NodeStatus()

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels

    @property
    def instance_id(self) -> str:
        """The EC2 instance ID: the last segment of providerID ("" without one)."""
        return (self.spec.provider_id or "").rsplit("/", 1)[-1]

    @property
    def ready(self) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)

    def with_label(self, key: str, value: str) -> Node:
        """This Node with one label set (for `kube.status.update_object`)."""
        metadata = self.metadata.model_copy(update={"labels": {**self.labels, key: value}})
        return self.model_copy(update={"metadata": metadata})
