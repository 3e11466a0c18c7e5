"""Instances and ENIs as the project's own views, by id or by our tags.

Called by ``Ec2Engine.describe`` / ``find_managed`` (the GangNodePool reconciler counts live
instances, the reaper sweeps by tag) and by the launch and release paths.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from provisioner.api import constants as c
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
from provisioner.cloud.tags import parse_tags, tags_to_dict
from provisioner.cloud.types import EniAttachment, InstanceView, NetworkInterfaceView

# Instances that bill or can bill again. shutting-down is on its way out and is not counted.
LIVE_STATES: Final = ("pending", "running", "stopping", "stopped")
# Every state, for a history (billing counts what terminated instances cost too).
ALL_STATES: Final = (*LIVE_STATES, "shutting-down", "terminated")
# EC2 caps the values of one filter; stay well under it.
_CHUNK: Final = 100


def _chunks(items: Sequence[str]) -> Iterator[list[str]]:
    for i in range(0, len(items), _CHUNK):
        yield list(items[i : i + _CHUNK])


def eni_view_from(raw: dict[str, Any]) -> NetworkInterfaceView:
    att = raw.get("Attachment")
    return NetworkInterfaceView(
        eni_id=str(raw["NetworkInterfaceId"]),
        status=str(raw.get("Status", "")),
        description=str(raw.get("Description") or ""),
        subnet_id=raw.get("SubnetId"),
        interface_type=str(raw.get("InterfaceType") or "interface"),
        attachment=EniAttachment(
            instance_id=att.get("InstanceId"),
            device_index=int(att.get("DeviceIndex", 0)),
            network_card_index=int(att.get("NetworkCardIndex", 0)),
            delete_on_termination=bool(att.get("DeleteOnTermination", False)),
            status=str(att.get("Status", "")),
        )
        if att
        else None,
    )


def instance_view_from(raw: dict[str, Any]) -> InstanceView:
    tags = tags_to_dict(raw.get("Tags"))
    placement = raw.get("Placement") or {}
    instance_id = str(raw["InstanceId"])
    enis = []
    for ni in raw.get("NetworkInterfaces") or ():
        ni = dict(ni)
        if ni.get("Attachment"):
            # Instance descriptions omit the instance id inside each attachment.
            ni["Attachment"] = {"InstanceId": instance_id, **ni["Attachment"]}
        enis.append(eni_view_from(ni))
    return InstanceView(
        instance_id=instance_id,
        state=str((raw.get("State") or {}).get("Name", "")),
        instance_type=str(raw.get("InstanceType", "")),
        availability_zone=placement.get("AvailabilityZone"),
        subnet_id=raw.get("SubnetId"),
        launch_time=raw.get("LaunchTime"),
        private_dns_name=raw.get("PrivateDnsName") or None,
        private_ip=raw.get("PrivateIpAddress") or None,
        client_token=raw.get("ClientToken") or None,
        tags=tags,
        managed=parse_tags(tags),
        network_interfaces=tuple(enis),
        state_reason=raw.get("StateTransitionReason") or None,
    )


def _paged_instances(ec2: Ec2Api, filters: list[dict[str, Any]]) -> list[InstanceView]:
    views: list[InstanceView] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"Filters": filters}
        if token:
            kwargs["NextToken"] = token
        page = ec2.describe_instances(**kwargs)
        for reservation in page.get("Reservations") or ():
            views.extend(instance_view_from(i) for i in reservation.get("Instances") or ())
        token = page.get("NextToken")
        if not token:
            return views


def describe_instances(ec2: Ec2Api, instance_ids: Sequence[str]) -> list[InstanceView]:
    """Views of those ids that exist; an id EC2 no longer knows is simply absent.

    A filter on ``instance-id`` is used instead of ``InstanceIds`` because the latter fails
    the whole call when one id is unknown, which a release of a half-gone gang must survive.
    """
    ids = list(dict.fromkeys(instance_ids))
    views: list[InstanceView] = []
    try:
        for chunk in _chunks(ids):
            views.extend(_paged_instances(ec2, [{"Name": "instance-id", "Values": chunk}]))
    except Exception as exc:
        raise to_cloud_error(exc, "DescribeInstances") from exc
    order = {iid: n for n, iid in enumerate(ids)}
    return sorted(views, key=lambda v: order.get(v.instance_id, len(order)))


def describe_by_id(ec2: Ec2Api, instance_ids: Sequence[str]) -> dict[str, InstanceView | None]:
    """What EC2 says of each id when asked BY ID; None for an id it answers NotFound.

    "Eventual consistency in the Amazon EC2 API": a filtered listing may miss an instance
    just launched, and NotFound by id right after a launch does not mean it does not exist,
    so only this answer can show an instance shutting-down or terminated. EC2 fails a whole
    call when one id is unknown ("TerminateInstances"/"DescribeInstances" API reference), so
    a chunk answering NotFound is asked again one id at a time.
    """
    ids = list(dict.fromkeys(instance_ids))
    found: dict[str, InstanceView | None] = {}
    for chunk in _chunks(ids):
        try:
            found.update((v.instance_id, v) for v in _by_ids(ec2, chunk))
        except CloudError as err:
            if err.kind is not ErrorKind.NOT_FOUND:
                raise
            for instance_id in chunk:
                try:
                    views = _by_ids(ec2, [instance_id])
                except CloudError as one:
                    if one.kind is not ErrorKind.NOT_FOUND:
                        raise
                    views = []
                found.update((v.instance_id, v) for v in views)
    return {i: found.get(i) for i in ids}


def _by_ids(ec2: Ec2Api, ids: list[str]) -> list[InstanceView]:
    try:
        page = ec2.describe_instances(InstanceIds=ids)
    except Exception as exc:
        raise to_cloud_error(exc, "DescribeInstances by id") from exc
    return [
        instance_view_from(i)
        for reservation in page.get("Reservations") or ()
        for i in reservation.get("Instances") or ()
    ]


def find_managed(
    ec2: Ec2Api,
    cluster: str,
    pool: str | None = None,
    group: str | None = None,
    states: Sequence[str] = LIVE_STATES,
) -> list[InstanceView]:
    filters: list[dict[str, Any]] = [
        {"Name": f"tag:{c.TAG_MANAGED}", "Values": ["true"]},
        {"Name": f"tag:{c.TAG_CLUSTER}", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": list(states)},
    ]
    if pool is not None:
        filters.append({"Name": f"tag:{c.TAG_POOL}", "Values": [pool]})
    if group is not None:
        filters.append({"Name": f"tag:{c.TAG_GROUP}", "Values": [group]})
    try:
        views = _paged_instances(ec2, filters)
    except Exception as exc:
        raise to_cloud_error(exc, f"DescribeInstances for cluster {cluster}") from exc
    return sorted(views, key=lambda v: v.instance_id)


def describe_enis(ec2: Ec2Api, filters: list[dict[str, Any]]) -> list[NetworkInterfaceView]:
    views: list[NetworkInterfaceView] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"Filters": filters}
        if token:
            kwargs["NextToken"] = token
        page = ec2.describe_network_interfaces(**kwargs)
        views.extend(eni_view_from(n) for n in page.get("NetworkInterfaces") or ())
        token = page.get("NextToken")
        if not token:
            return views
