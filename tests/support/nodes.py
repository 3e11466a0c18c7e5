"""Node bodies for tests: a gang member as the node simulator (or a real node) registers."""

from __future__ import annotations

from typing import Any

from provisioner.api import constants as c


def node(
    instance_id: str,
    *,
    pool: str = "pool-a",
    group: str = "gen-1",
    ready: bool = True,
    zone: str = "us-east-1a",
) -> dict[str, Any]:
    """The Node of EC2 instance `instance_id`, labelled with its pool and group."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{instance_id}",
            "labels": {c.POOL_LABEL: pool, c.GROUP_LABEL: group},
        },
        "spec": {"providerID": f"aws:///{zone}/{instance_id}"},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }
