"""The pieces of an IAM request context the emulator builds for EC2 calls: a resource's ARN,
its tags as `aws:ResourceTag/<key>`, a request's tags as `aws:RequestTag/<key>` and
`aws:TagKeys`. Every tag key is also given as its `ec2:` alias (`ec2:ResourceTag/<key>`);
`policy_evaluation` keeps only those the action supports (`service_reference`)."""

from __future__ import annotations

from typing import Any, Final

from devenv.emulator.policy_evaluation import RequestContext
from devenv.emulator.state import EMULATOR

__all__ = [
    "arn",
    "as_list",
    "existing",
    "kind_of",
    "request_tag_keys",
    "resource_tags",
    "tag_keys",
    "tag_specs",
]

_TYPES_BY_PREFIX: Final = {
    "i": "instance",
    "vol": "volume",
    "eni": "network-interface",
    "lt": "launch-template",
    "fleet": "fleet",
    "pg": "placement-group",
    "ami": "image",
    "sg": "security-group",
    "subnet": "subnet",
    "snap": "snapshot",
    "cr": "capacity-reservation",
    "key": "key-pair",
}


def as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value or ()]


def arn(response: Any, kind: str, name: str, *, service: str = "ec2") -> str:
    account = "" if kind == "image" else response.current_account
    return f"arn:{response.partition}:{service}:{response.region}:{account}:{kind}/{name}"


def tag_keys(prefix: str, tags: dict[str, str]) -> dict[str, Any]:
    keys: dict[str, Any] = {}
    for key, value in tags.items():
        keys[f"aws:{prefix}/{key}"] = value
        keys[f"ec2:{prefix}/{key}"] = value
    return keys


def request_tag_keys(tags: dict[str, str]) -> dict[str, Any]:
    keys = tag_keys("RequestTag", tags)
    if tags:
        keys["aws:TagKeys"] = sorted(tags)
    return keys


def tag_specs(specs: Any) -> dict[str, dict[str, str]]:
    """TagSpecifications (of a request or a launch template's data) by resource type."""
    by_type: dict[str, dict[str, str]] = {}
    for spec in specs or ():
        tags = spec.get("Tags") or spec.get("Tag") or []
        by_type.setdefault(str(spec.get("ResourceType") or ""), {}).update(
            {str(t["Key"]): str(t.get("Value") or "") for t in tags}
        )
    return by_type


def kind_of(resource_id: str) -> str:
    return _TYPES_BY_PREFIX.get(resource_id.split("-", 1)[0], "unknown")


def resource_tags(response: Any, resource_id: str) -> dict[str, str]:
    backend = response.ec2_backend
    if resource_id.startswith("pg-") or kind_of(resource_id) == "placement-group":
        try:
            group = EMULATOR.placement_groups.find(backend, group_id=resource_id)
        except Exception:
            return {}
        return dict(group.tags)
    return dict(backend.tags.get(resource_id) or {})


def existing(
    response: Any, action: str, resource_id: str, kind: str | None = None
) -> RequestContext:
    kind = kind or kind_of(resource_id)
    return RequestContext(
        action,
        arn(response, kind, resource_id),
        tag_keys("ResourceTag", resource_tags(response, resource_id)),
    )
