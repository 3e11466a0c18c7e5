"""The pieces every IAM document here is made of: a statement, a cluster's tag conditions,
a region's partition. Used by the per-service statement modules and by ``iam_policy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from provisioner.api import constants as c

__all__ = ["VERSION", "Policy", "partition_of", "request_tags", "resource_tags", "statement"]

Policy = dict[str, Any]

VERSION: Final = "2012-10-17"


def partition_of(region: str) -> str:
    """The ARN partition a region belongs to (aws, aws-cn, aws-us-gov)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def statement(sid: str, actions: Sequence[str] | str, resource: Any, **extra: Any) -> Policy:
    action: Any = actions if isinstance(actions, str) else list(actions)
    return {"Sid": sid, "Effect": "Allow", "Action": action, "Resource": resource, **extra}


def request_tags(cluster: str) -> Policy:
    """What a create must tag its new resource with: managed, and this cluster."""
    return {
        "StringEquals": {
            f"aws:RequestTag/{c.TAG_MANAGED}": "true",
            f"aws:RequestTag/{c.TAG_CLUSTER}": cluster,
        }
    }


def resource_tags(cluster: str) -> Policy:
    """What an existing resource must carry to be touched: managed, and this cluster."""
    return {
        "StringEquals": {
            f"aws:ResourceTag/{c.TAG_MANAGED}": "true",
            f"aws:ResourceTag/{c.TAG_CLUSTER}": cluster,
        }
    }
