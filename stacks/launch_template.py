"""The pool's EC2 launch template: a dynamic resource on boto3, and its request builder.

Declared by ``stacks.pool_program``; its provider runs in the Pulumi provider host. The engine
launches the gang from this template (DESIGN §5), so the template carries what every gang
node needs: the AMI, the nodeadm user data, the instance profile, IMDSv2 required, the
pool's tags on everything launched, and — when the shape asks — one EFA interface per
network card, the cluster placement group, and a Capacity Block's target with
``MarketType=capacity-block`` (a capacity-block fleet can target one only so).

Create is idempotent by name: the name is derived from cluster and pool, so a template that
already exists (an earlier create whose result was lost in a crash) is adopted and brought
to the wanted data as a new default version, never duplicated. Data changes make a new
version and set it as default; name or region changes replace the template.

Each create sends its own ClientToken (`client_token`): EC2 answers a repeated token with
the original result ("Ensuring idempotency in Amazon EC2 API requests"), so a template made
again after it was deleted outside the stack must not reuse the token of the first create,
or EC2 would hand back the deleted template.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Mapping
from typing import Any, Final

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    UpdateResult,
)

from provisioner.api.constants import FailureKind
from provisioner.cloud.instancetypes import efa_interfaces
from stacks.aws import client, code_of
from stacks.base import PoolProvider, PoolResource, changed_keys, diff_by_keys
from stacks.failures import PoolResourceError, as_pool_error

__all__ = [
    "LaunchTemplate",
    "LaunchTemplateProvider",
    "adopt",
    "client_token",
    "efa_interfaces",
    "launch_template_data",
    "launch_template_request",
    "root_volume_mapping",
]

REPLACE_KEYS: Final = ("name", "region")
DATA_KEYS: Final = (
    "image_id",
    "instance_type",
    "user_data",
    "instance_profile_arn",
    "security_group_ids",
    "efa_network_cards",
    "efa_only",
    "placement_group_name",
    "capacity_reservation_id",
    "capacity_reservation_kind",
    "tags",
    "metadata_hop_limit",
    "root_volume",
)
# Launched resources that carry the pool's tags from the template.
TAGGED_RESOURCE_TYPES: Final = ("instance", "volume", "network-interface")
NOT_FOUND_CODES: Final = frozenset(
    {
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateId.NotFoundException",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.Malformed",
    }
)
ALREADY_EXISTS_CODE: Final = "InvalidLaunchTemplateName.AlreadyExistsException"
# The input naming one create of the template (`LaunchTemplateProvider.check`).
CREATE_ATTEMPT: Final = "create_attempt"
# A container on the node (the kubelet's pods) is one hop past the instance; IMDSv2 answers
# only within the hop limit, so 2 lets pods reach it while a third hop (a proxy) cannot.
DEFAULT_HOP_LIMIT: Final = 2


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": str(k), "Value": str(v)} for k, v in sorted(tags.items())]


def launch_template_data(props: Mapping[str, Any]) -> dict[str, Any]:
    """The LaunchTemplateData for ``props`` (pure; the unit tests pin every field)."""
    tags = dict(props.get("tags") or {})
    data: dict[str, Any] = {
        "ImageId": props["image_id"],
        "InstanceType": props["instance_type"],
        # Unlike RunInstances, launch template user data is sent base64-encoded by the caller.
        "UserData": base64.b64encode(str(props["user_data"]).encode()).decode("ascii"),
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "HttpPutResponseHopLimit": int(props.get("metadata_hop_limit") or DEFAULT_HOP_LIMIT),
        },
    }
    if props.get("instance_profile_arn"):
        data["IamInstanceProfile"] = {"Arn": props["instance_profile_arn"]}
    security_groups = list(props.get("security_group_ids") or ())
    cards = list(props.get("efa_network_cards") or ())
    if cards:
        data["NetworkInterfaces"] = efa_interfaces(
            cards, security_groups, efa_only=bool(props.get("efa_only"))
        )
    elif security_groups:
        data["SecurityGroupIds"] = security_groups
    if props.get("placement_group_name"):
        data["Placement"] = {"GroupName": props["placement_group_name"]}
    if props.get("capacity_reservation_id") and (
        props.get("capacity_reservation_kind") == "capacity-block"
    ):
        # A capacity-block fleet reads the block and its market type only from the launch
        # template ("Tutorial: Configure your EC2 Fleet to launch instances into Capacity
        # Blocks"); RunInstances sends both itself.
        # An ODCR is not targeted here: a reserved-capacity fleet names it in
        # ReservedCapacityOptions and RunInstances in its request, and a fleet does not
        # draw on a reservation its template targets by id ("Use Capacity Reservations in
        # EC2 Fleet": Open or Target by group only).
        data["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": props["capacity_reservation_id"]}
        }
        data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    if tags:
        data["TagSpecifications"] = [
            {"ResourceType": rt, "Tags": _tag_list(tags)} for rt in TAGGED_RESOURCE_TYPES
        ]
    volume = props.get("root_volume")
    if volume:
        data["BlockDeviceMappings"] = [root_volume_mapping(volume)]
    return data


def root_volume_mapping(volume: Mapping[str, Any]) -> dict[str, Any]:
    """The root device's mapping ("Block device mappings for volumes on Amazon EC2
    instances"): named by the AMI's RootDeviceName, so it replaces the AMI's root volume
    instead of adding a second disk, and deleted with the instance, so a terminated gang
    leaves no volume billing."""
    ebs: dict[str, Any] = {
        "VolumeSize": int(volume["size"]),
        "VolumeType": str(volume["type"]),
        "DeleteOnTermination": True,
    }
    if volume.get("iops"):
        ebs["Iops"] = int(volume["iops"])
    if volume.get("throughput"):
        ebs["Throughput"] = int(volume["throughput"])
    return {"DeviceName": str(volume["device_name"]), "Ebs": ebs}


def client_token(props: Mapping[str, Any]) -> str:
    """The token of one create: the same for a retry of that create (botocore's retries
    of the call, a replay of the same recorded inputs), so EC2 answers it with the template
    it already made; another for the next create of the same name and data (a template
    made again after it was deleted outside the stack), which EC2 must not answer with the
    deleted one. What tells the two apart is the create's attempt (`CREATE_ATTEMPT`)."""
    body = json.dumps(
        {
            "name": props["name"],
            "data": launch_template_data(props),
            "attempt": str(props.get(CREATE_ATTEMPT) or ""),
        },
        sort_keys=True,
    )
    return "agp-lt-" + hashlib.sha256(body.encode()).hexdigest()[:32]


def launch_template_request(props: Mapping[str, Any]) -> dict[str, Any]:
    """The CreateLaunchTemplate request for ``props``."""
    request: dict[str, Any] = {
        "LaunchTemplateName": props["name"],
        "LaunchTemplateData": launch_template_data(props),
        "ClientToken": client_token(props),
    }
    tags = dict(props.get("tags") or {})
    if tags:
        request["TagSpecifications"] = [
            {"ResourceType": "launch-template", "Tags": _tag_list(tags)}
        ]
    return request


def _outs(props: Mapping[str, Any], template_id: str, version: Any) -> dict[str, Any]:
    return {**props, "launch_template_id": template_id, "version": str(version)}


def _describe_by(ec2: Any, **selector: Any) -> dict[str, Any] | None:
    try:
        found = ec2.describe_launch_templates(**selector).get("LaunchTemplates") or []
    except Exception as exc:
        if code_of(exc) in NOT_FOUND_CODES:
            return None
        raise as_pool_error(exc, "DescribeLaunchTemplates") from exc
    return dict(found[0]) if found else None


def _new_default_version(ec2: Any, template_id: str, props: Mapping[str, Any]) -> int:
    try:
        version = ec2.create_launch_template_version(
            LaunchTemplateId=template_id, LaunchTemplateData=launch_template_data(props)
        )["LaunchTemplateVersion"]["VersionNumber"]
        ec2.modify_launch_template(LaunchTemplateId=template_id, DefaultVersion=str(version))
    except Exception as exc:
        raise as_pool_error(exc, f"New version of launch template {template_id}") from exc
    return int(version)


class LaunchTemplateProvider(PoolProvider):
    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = [
            CheckFailure(key, f"{key} is required")
            for key in ("name", "region", "image_id", "instance_type", "user_data")
            if not news.get(key)
        ]
        hops = news.get("metadata_hop_limit", DEFAULT_HOP_LIMIT)
        if not isinstance(hops, int | float) or not 1 <= int(hops) <= 64:
            failures.append(CheckFailure("metadata_hop_limit", "must be between 1 and 64"))
        cards = news.get("efa_network_cards") or []
        if len(set(cards)) != len(cards):
            failures.append(CheckFailure("efa_network_cards", "list each network card once"))
        inputs = dict(news)
        inputs["security_group_ids"] = sorted(news.get("security_group_ids") or [])
        # A template in the state keeps its attempt (no diff reads it); a create, which
        # Pulumi checks with no old inputs (the first one, or one after a refresh dropped
        # the template), gets a new one. Checked inputs are written to the stack's state
        # with the pending create before `create` runs, so a replay of that create sends
        # the same token. A crash between the create and its record cannot make a second
        # template either way: the name is unique in the region, and a create that meets
        # it taken adopts it (`create`), as the driver's recovery does (`adopt`).
        inputs[CREATE_ATTEMPT] = str(olds.get(CREATE_ATTEMPT) or uuid.uuid4().hex)
        return CheckResult(inputs, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_by_keys(
            olds, news, replace_keys=REPLACE_KEYS, update_keys=(*DATA_KEYS, "endpoint")
        )

    def create(self, props: dict[str, Any]) -> CreateResult:
        ec2 = client("ec2", props)
        try:
            made = ec2.create_launch_template(**launch_template_request(props))["LaunchTemplate"]
        except Exception as exc:
            if code_of(exc) != ALREADY_EXISTS_CODE:
                raise as_pool_error(exc, f"CreateLaunchTemplate {props['name']}") from exc
            # An earlier create got this far and its result was lost: adopt, then make our
            # data its default version.
            existing = _describe_by(ec2, LaunchTemplateNames=[props["name"]])
            if existing is None:
                raise PoolResourceError(
                    "LaunchTemplateConflict",
                    f"Launch template {props['name']} was reported as existing and then not "
                    "found; it is being created or deleted by someone else. Retry.",
                    kind=FailureKind.RETRYABLE,
                ) from exc
            template_id = str(existing["LaunchTemplateId"])
            return CreateResult(
                template_id,
                _outs(props, template_id, _new_default_version(ec2, template_id, props)),
            )
        template_id = str(made["LaunchTemplateId"])
        return CreateResult(template_id, _outs(props, template_id, made["DefaultVersionNumber"]))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        found = _describe_by(client("ec2", props), LaunchTemplateIds=[id_])
        if found is None:
            return ReadResult("", {})
        return ReadResult(id_, _outs(props, id_, found["DefaultVersionNumber"]))

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        version = olds.get("version")
        if changed_keys(olds, news, DATA_KEYS):
            version = _new_default_version(client("ec2", news), id_, news)
        return UpdateResult(_outs(news, id_, version))

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        try:
            client("ec2", props).delete_launch_template(LaunchTemplateId=id_)
        except Exception as exc:
            if code_of(exc) not in NOT_FOUND_CODES:
                raise as_pool_error(exc, f"DeleteLaunchTemplate {id_}") from exc


def adopt(props: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The template a create interrupted by a crash may have made, as (id, outputs)."""
    found = _describe_by(client("ec2", props), LaunchTemplateNames=[props["name"]])
    if found is None:
        return None
    template_id = str(found["LaunchTemplateId"])
    return template_id, _outs(props, template_id, found["DefaultVersionNumber"])


class LaunchTemplate(PoolResource):
    provider_type = LaunchTemplateProvider
    output_names = ("launch_template_id", "version")
    adopter = adopt

    launch_template_id: pulumi.Output[str]
    version: pulumi.Output[str]
