"""The active set's Nodes, as the GangNodePool reconciler reads and labels them.

Read each pass: which of the set's Nodes are Ready and carry the pool and group labels
(`set_ready_nodes`), and which of those cannot run one gang pod yet (`unusable_nodes`, from
`usable`). Written after the plan, by the pool reconciler alone: the group label the set's
Nodes lack (`label_set_nodes`); the observe step only reads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from provisioner.api import constants as c
from provisioner.api.gangnodepool import GangNodePool, GangNodePoolStatus, UnusableNode
from provisioner.api.nodes import Node
from provisioner.api.settings import StartupTaint
from provisioner.controllers.pool.steps import AnyView
from provisioner.controllers.pool.usable import missing, pod_requests_of
from provisioner.kube.cache import TypedCache
from provisioner.kube.errors import KubeNotFound
from provisioner.kube.resources import NODES
from provisioner.kube.status import ObjectStore, update_object

__all__ = ["label_set_nodes", "set_ready_nodes", "unusable_nodes"]


def set_ready_nodes(
    nodes: TypedCache[Node], pool: str, status: GangNodePoolStatus, live: set[str]
) -> dict[str, Node]:
    """The Nodes, by instance, of the active set that are Ready and labelled pool + group.

    Nodes of the active set that lack the group label get it after the plan
    (`label_set_nodes`); they are counted on the pass that label change triggers.
    """
    group = status.active_group
    wanted = set(status.instance_ids)
    ready: dict[str, Node] = {}
    for node in nodes.list_indexed(pool):
        instance_id = node.instance_id
        if instance_id not in wanted or instance_id not in live or group is None:
            continue
        if node.labels.get(c.POOL_LABEL) != pool:
            continue
        if node.labels.get(c.GROUP_LABEL) != group:
            continue  # labelled after the plan; counted on the pass that triggers
        if node.ready:
            ready[instance_id] = node
    return ready


def label_set_nodes(kube: ObjectStore, nodes: TypedCache[Node], pool: str, view: AnyView) -> None:
    """Give the group label to the active set's Nodes that lack it: a launch template
    outlives generations and cannot carry one."""
    group = view.status.active_group
    if group is None:
        return
    members = set(view.status.instance_ids) & {i.instance_id for i in view.live}
    for node in nodes.list_indexed(pool):
        if node.instance_id not in members or node.labels.get(c.POOL_LABEL) != pool:
            continue
        if node.labels.get(c.GROUP_LABEL) == group:
            continue
        with contextlib.suppress(KubeNotFound):  # the node left meanwhile
            labelled = node.with_label(c.GROUP_LABEL, group)
            update_object(kube, NODES, node, labelled, c.FIELD_MANAGER)


def unusable_nodes(
    pool: GangNodePool, ready: Iterable[Node], startup_taints: Iterable[StartupTaint]
) -> tuple[UnusableNode, ...]:
    """The `ready` nodes that cannot run one gang pod yet, and what each lacks
    (`usable`); `plan` leaves them out of the count while the set joins. They are the nodes
    `set_ready_nodes` already read: the label index is read once a pass."""
    requests = pod_requests_of(pool.spec)
    taints = tuple(startup_taints)
    out: list[UnusableNode] = []
    for node in ready:
        lacking = missing(node, requests, taints)
        if lacking:
            out.append(UnusableNode(node=node.name, instance_id=node.instance_id, missing=lacking))
    return tuple(sorted(out, key=lambda u: u.node))
