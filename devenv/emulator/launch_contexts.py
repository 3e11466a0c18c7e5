"""The authorizations a launch needs: every resource a RunInstances or CreateFleet touches,
with the condition keys the Service Authorization Reference lists for it, and the
`iam:PassRole` of its instance profile's role.

What it follows:
- "Actions, resources, and condition keys for Amazon EC2", RunInstances: the instance,
  volumes and network interfaces it creates (`aws:RequestTag/<key>`, `aws:TagKeys` from the
  request's TagSpecifications for that type, and the launch template's beneath them), and
  what it uses: the image (`ec2:Owner`: the owner alias, amazon or aws-marketplace, when
  the image has one, else its owner account), the subnets, security groups, key pair,
  placement group, capacity reservation and launch template (their `aws:ResourceTag`).
  Launched from a template, every resource carries `ec2:LaunchTemplate` (its ARN), and
  those the template names (not the request) `ec2:IsLaunchTemplateResource` = true
  ("Control the use of launch templates", Amazon EC2 User Guide).
- CreateFleet, the same page: `ec2:CreateFleet` on the fleet, its instances and volumes,
  the image, subnets, launch template, capacity reservations and placement group. An
  instant fleet launches with the caller's permissions (the EC2 Fleet service-linked role
  is for the other fleet types, "EC2 Fleet prerequisites"), so each launch is also
  authorized as `ec2:RunInstances` on every resource above, as EC2's refusals of such
  fleets show ("not authorized to perform: ec2:RunInstances on resource: ...").
- "Grant a user permissions to pass a role to an AWS service" (IAM User Guide) and "IAM
  roles for Amazon EC2": launching with an instance profile needs `iam:PassRole` on its
  role, with `iam:PassedToService` = ec2.amazonaws.com.
- Tags applied at creation are also authorized as `ec2:CreateTags` with `ec2:CreateAction`
  ("Grant permission to tag Amazon EC2 resources during creation"), once per tagged type.
Whether a launch template's tags count as the request's tags is not settled by the pages:
`set_template_tags_are_request_tags` gives each answer (default: they count).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from moto.iam.models import iam_backends

from devenv.emulator.context_keys import (
    arn,
    existing,
    request_tag_keys,
    tag_specs,
)
from devenv.emulator.policy_evaluation import RequestContext

__all__ = ["launch_contexts", "set_template_tags_are_request_tags"]

EC2_SERVICE: Final = "ec2.amazonaws.com"
_RUN: Final = "ec2:RunInstances"
_FLEET: Final = "ec2:CreateFleet"
_CREATED: Final = {
    _RUN: ("instance", "volume", "network-interface"),
    _FLEET: ("fleet", "instance", "volume"),
}
_template_tags_are_request_tags = True


def set_template_tags_are_request_tags(counted: bool) -> None:
    """Whether a launch template's TagSpecifications count as a launch's request tags
    (`aws:RequestTag`) for the types they tag: the pages do not say; each answer here."""
    global _template_tags_are_request_tags
    _template_tags_are_request_tags = counted


def _template(response: Any, spec: Any) -> tuple[str | None, dict[str, Any]]:
    """The launch template `spec` names (its id) and the data of the version it names."""
    backend = response.ec2_backend
    spec = spec or {}
    tid = spec.get("LaunchTemplateId")
    if not tid and spec.get("LaunchTemplateName"):
        tid = backend.launch_template_name_to_ids.get(str(spec["LaunchTemplateName"]))
    template = backend.launch_templates.get(str(tid)) if tid else None
    if template is None:
        return (str(tid) if tid else None), {}
    wanted = str(spec.get("Version") or "$Default")
    versions = list(template.versions)
    version = (
        versions[-1]
        if wanted == "$Latest"
        else next((v for v in versions if str(v.number) == wanted), template.default_version())
    )
    return str(tid), dict(version.data or {})


def _used(data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(resource type, id or name) of what launch data (a request's or a template's) uses."""
    if data.get("ImageId"):
        yield "image", str(data["ImageId"])
    if data.get("SubnetId"):
        yield "subnet", str(data["SubnetId"])
    for group in data.get("SecurityGroupIds") or ():
        yield "security-group", str(group)
    for eni in data.get("NetworkInterfaces") or ():
        if eni.get("SubnetId"):
            yield "subnet", str(eni["SubnetId"])
        for group in eni.get("Groups") or eni.get("SecurityGroupIds") or ():
            yield "security-group", str(group)
    if data.get("KeyName"):
        yield "key-pair", str(data["KeyName"])
    placement = data.get("Placement") or {}
    if placement.get("GroupName") or placement.get("GroupId"):
        yield "placement-group", str(placement.get("GroupName") or placement.get("GroupId"))
    target = (data.get("CapacityReservationSpecification") or {}).get(
        "CapacityReservationTarget"
    ) or {}
    if target.get("CapacityReservationId"):
        yield "capacity-reservation", str(target["CapacityReservationId"])


def _image_keys(response: Any, image_id: str) -> dict[str, Any]:
    ami = response.ec2_backend.amis.get(image_id)
    if ami is None:
        return {}  # the launch itself answers InvalidAMIID.NotFound
    return {"ec2:Owner": str(ami.owner_alias or ami.owner_id)}


def _used_context(
    response: Any,
    action: str,
    kind: str,
    name: str,
    template_arn: str | None,
    from_template: bool | None,
) -> RequestContext:
    ctx = existing(response, action, name, kind)
    keys = dict(ctx.keys)
    if kind == "image":
        keys.update(_image_keys(response, name))
    if template_arn:
        keys["ec2:LaunchTemplate"] = template_arn
        if from_template is not None:
            keys["ec2:IsLaunchTemplateResource"] = "true" if from_template else "false"
    return RequestContext(action, ctx.resource, keys)


def _pass_role(response: Any, data: dict[str, Any]) -> list[RequestContext]:
    profile = data.get("IamInstanceProfile") or {}
    if not (profile.get("Arn") or profile.get("Name")):
        return []
    iam = iam_backends[response.current_account][response.partition]
    try:
        found = (
            iam.get_instance_profile_by_arn(str(profile["Arn"]))
            if profile.get("Arn")
            else iam.get_instance_profile(str(profile["Name"]))
        )
    except Exception:
        return []  # the launch itself answers for a profile that does not exist
    return [
        RequestContext("iam:PassRole", str(role.arn), {"iam:PassedToService": EC2_SERVICE})
        for role in found.roles
    ]


def _one_launch(
    response: Any,
    action: str,
    request: dict[str, Any],
    template_spec: Any,
    requested: dict[str, dict[str, str]],
) -> list[RequestContext]:
    """The authorizations of one launch of `action` from `request` (RunInstances' params, or
    one fleet override) and the template it names."""
    tid, data = _template(response, template_spec) if template_spec else (None, {})
    template_arn = arn(response, "launch-template", tid) if tid else None
    template_tags = (
        tag_specs(data.get("TagSpecifications")) if _template_tags_are_request_tags else {}
    )
    contexts = []
    for kind in _CREATED[action]:
        tags = {**template_tags.get(kind, {}), **requested.get(kind, {})}
        keys = request_tag_keys(tags)
        if template_arn:
            keys["ec2:LaunchTemplate"] = template_arn
        contexts.append(RequestContext(action, arn(response, kind, "*"), keys))
        if kind in requested:
            create = {**request_tag_keys(tags), "ec2:CreateAction": action.split(":", 1)[1]}
            contexts.append(RequestContext("ec2:CreateTags", arn(response, kind, "*"), create))
    if tid:
        contexts.append(_used_context(response, action, "launch-template", tid, template_arn, None))
    from_request = dict.fromkeys(_used(request))
    # What the request names replaces the template's own (for lists, the whole list).
    named_kinds = {kind for kind, _ in from_request}
    from_template = [u for u in _used(data) if u[0] not in named_kinds]
    for kind, name in from_request:
        contexts.append(_used_context(response, action, kind, name, template_arn, False))
    for kind, name in dict.fromkeys(from_template):
        contexts.append(_used_context(response, action, kind, name, template_arn, True))
    contexts += _pass_role(response, {**data, **request})
    return contexts


# What the reference lists for CreateFleet besides what it creates: security groups, key
# pairs and network interfaces are the fleet's launches' (authorized as RunInstances).
_FLEET_TAKES: Final = frozenset(
    {*_CREATED[_FLEET], "image", "subnet", "launch-template", "capacity-reservation"}
    | {"placement-group"}
)


def _type_of(resource: str) -> str:
    return resource.split(":", 5)[5].split("/", 1)[0]


def launch_contexts(response: Any, action: str) -> list[RequestContext]:
    """Every authorization the launch `action` (RunInstances or CreateFleet) needs."""
    params = response.params
    requested = tag_specs(params.get("TagSpecifications"))
    if action == _RUN:
        return _unique(_one_launch(response, _RUN, params, params.get("LaunchTemplate"), requested))
    contexts: list[RequestContext] = []
    target = (params.get("ReservedCapacityOptions") or {}).get("CapacityReservationTarget") or {}
    reservations = [str(r) for r in target.get("CapacityReservationIds") or ()]
    for config in params.get("LaunchTemplateConfigs") or ():
        spec = config.get("LaunchTemplateSpecification")
        for override in config.get("Overrides") or [{}]:
            request = dict(override)
            if reservations:
                # One reservation per launch is what `_used` reads; a fleet names a list.
                request["CapacityReservationSpecification"] = {
                    "CapacityReservationTarget": {"CapacityReservationId": reservations[0]}
                }
            launch = _one_launch(response, _FLEET, request, spec, requested)
            contexts += [
                c for c in launch if c.action != _FLEET or _type_of(c.resource) in _FLEET_TAKES
            ]
            # The instant fleet's own launches, on the caller's permissions.
            contexts += [
                c
                for c in _one_launch(response, _RUN, request, spec, requested)
                if c.action != "ec2:CreateTags"
            ]
        for extra in reservations[1:]:
            contexts.append(
                _used_context(response, _FLEET, "capacity-reservation", extra, None, False)
            )
    return _unique(contexts)


def _unique(contexts: list[RequestContext]) -> list[RequestContext]:
    seen: dict[str, RequestContext] = {}
    for ctx in contexts:
        seen.setdefault(repr((ctx.action, ctx.resource, sorted(ctx.keys.items()))), ctx)
    return list(seen.values())
