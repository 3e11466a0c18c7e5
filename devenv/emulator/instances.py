"""Launch-time ENIs and termination (P4, P5), per-resource tags (P7), and where a launch lands."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from moto.ec2.exceptions import InvalidInstanceIdError
from moto.ec2.models import EC2Backend
from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

from devenv.emulator.instance_events import LAUNCHED, TERMINATED
from devenv.emulator.instance_reads import reservations_by_instance_ids
from devenv.emulator.patching import original
from devenv.emulator.state import EMULATOR


# --- where a launch lands ---------------------------------------------------------------
def request_az(backend: Any, spec: Mapping[str, Any]) -> str | None:
    az = (spec.get("Placement") or {}).get("AvailabilityZone")
    if az:
        return str(az)
    subnet_id = spec_subnet(spec)
    if subnet_id:
        return str(backend.get_subnet(subnet_id).availability_zone)
    return None


def spec_subnet(spec: Mapping[str, Any]) -> str | None:
    if spec.get("SubnetId"):
        return str(spec["SubnetId"])
    interfaces = sorted(
        spec.get("NetworkInterfaces") or [], key=lambda n: int(n.get("DeviceIndex") or 0)
    )
    return next((str(n["SubnetId"]) for n in interfaces if n.get("SubnetId")), None)


def template_data(backend: Any, launch_template: Mapping[str, Any] | None) -> dict[str, Any]:
    """The data of the launch template a RunInstances or CreateFleet request names.

    A template that does not exist (deleted, or never made) fails the request with
    ``InvalidLaunchTemplateId.NotFound`` (by id) or
    ``InvalidLaunchTemplateName.NotFoundException`` (by name), as the page "Error codes for
    the Amazon EC2 API" lists them (moto alone indexed an empty answer and failed with a 500).
    """
    if not launch_template:
        return {}
    # Raises InvalidLaunchTemplateId.NotFound for a missing id (``launch_templates``).
    data: dict[str, Any] = backend._get_template_from_args(launch_template).data
    return data


# --- P4 and P5: ENIs at launch and termination -------------------------------------------
def backend_run_instances(
    self: Any,
    image_id: str,
    count: int,
    user_data: Any,
    security_group_names: list[str],
    **kwargs: Any,
) -> Any:
    reservation = original(EC2Backend, "run_instances")(
        self, image_id, count, user_data, security_group_names, **kwargs
    )
    specs = {int(n.get("DeviceIndex") or 0): n for n in kwargs.get("nics") or []}
    for instance in reservation.instances:
        for index, eni in instance.nics.items():
            spec = specs.get(index)
            if spec is None or not ({"NetworkInterfaceId", "DeleteOnTermination"} & set(spec)):
                eni.delete_on_termination = True
    launched = [i.id for i in reservation.instances]
    EMULATOR.note_launched(launched)
    EMULATOR.instance_events.add(LAUNCHED, launched)
    return reservation


def backend_describe_instances(self: Any, filters: Any = None) -> list[Any]:
    """A listing (DescribeInstances without ids) leaves out what the listing lag hides and
    what terminated about an hour ago ("Eventual consistency in the Amazon EC2 API";
    "TerminateInstances"; see `consistency.py`)."""
    reservations: list[Any] = original(EC2Backend, "describe_instances")(self, filters)
    hidden = EMULATOR.hidden_from_listings()
    if not hidden:
        return reservations
    shown = []
    for reservation in reservations:  # moto's are shallow copies: safe to narrow
        reservation.instances = [i for i in reservation.instances if i.id not in hidden]
        if reservation.instances:
            shown.append(reservation)
    return shown


def backend_get_reservations_by_instance_ids(
    self: Any, instance_ids: list[str], filters: Any = None
) -> list[Any]:
    """DescribeInstances BY ID: an id not yet propagated to the caller (the describe lag) or
    terminated about an hour ago fails the whole call with InvalidInstanceID.NotFound, as an
    unknown id does ("Eventual consistency in the Amazon EC2 API"; "TerminateInstances")."""
    unknown = EMULATOR.not_found_by_id(list(instance_ids))
    if unknown:
        raise InvalidInstanceIdError(unknown)
    # moto's answer, copying only the reservations it keeps (P16).
    return reservations_by_instance_ids(self, instance_ids, filters)


def backend_terminate_instances(self: Any, instance_ids: list[str]) -> Any:
    # "Eventual consistency in the Amazon EC2 API": TerminateInstances may answer NotFound
    # for an id just launched, and then terminates nothing ("TerminateInstances": a request
    # that fails terminates none of its instances); an instance terminated about an hour ago
    # is unknown to it too (see `consistency.py`).
    unknown = EMULATOR.not_found_to_terminate(list(instance_ids))
    if unknown:
        raise InvalidInstanceIdError(unknown)
    # AWS answers a repeated terminate with terminated -> terminated; moto would tear the
    # instance down again and fail on the ENI it already deleted. Releases are retried, so
    # the repeat must succeed.
    instances = self.get_multi_instances_by_id(instance_ids)
    done = [i for i in instances if i.state == "terminated"]
    todo = [i.id for i in instances if i.state != "terminated"]
    terminated = original(EC2Backend, "terminate_instances")(self, todo) if todo else []
    newly = [instance for instance, previous in terminated if previous.name != "terminated"]
    EMULATOR.schedule_detaches(self, newly)
    EMULATOR.note_terminated([instance.id for instance in newly])
    EMULATOR.instance_events.add(TERMINATED, [instance.id for instance in newly])
    return [*terminated, *((i, copy.copy(i._state)) for i in done)]


# --- P7: one resource's tags ----------------------------------------------------------------
def own_tags(resource: Any) -> dict[str, str]:
    """The resource's own entry of its region's tag table, key to value (empty without id)."""
    resource_id = getattr(resource, "id", None)
    # `.get`: the table is a defaultdict, and a read must not add an empty entry.
    return (resource.ec2_backend.tags.get(resource_id) or {}) if resource_id else {}


def get_tags(self: Any) -> list[dict[str, str]]:
    resource_id = getattr(self, "id", None)
    if not resource_id:
        return []
    tags = own_tags(self)
    resource_type = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource_id), "")
    return [
        {"resource_id": resource_id, "key": k, "value": v, "resource_type": resource_type}
        for k, v in tags.items()
    ]
