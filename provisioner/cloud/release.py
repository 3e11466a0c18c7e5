"""Release a gang: terminate its instances and delete the ENIs they would leave (DESIGN §4.8).

Called by ``Ec2Engine.release``, which the GangNodePool reconciler (through the gang
instance set's delete in the pool's stack) and the reaper use.

The order matters. Before terminating, the secondary ENIs attached to the gang with
DeleteOnTermination=false are recorded: once the instances are gone nothing links those
ENIs to the gang any more. Then the instances are terminated and the VPC CNI's ENIs are
looked up once more by description (it may have attached one after the first look, and
cannot attach one after the terminate). The ENIs found are waited for (bounded, on the
injected clock) until EC2 has detached them, and deleted. On a retry,
when the first pass died after terminating, a detached VPC CNI ENI is still found by its
exact ``aws-K8S-<instance-id>`` description. Nothing else is ever deleted: an ENI must have
been attached to one of the target instances when recorded, or carry that exact description,
and be detached (status ``available``) when deleted.

Every step is idempotent: already-terminated instances are skipped, already-deleted ENIs
count as deleted, so a release can be repeated until its report is complete.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from provisioner.api import constants as c
from provisioner.api.clock import Clock
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import ErrorKind, to_cloud_error
from provisioner.cloud.types import NetworkInterfaceView, ReleaseReport
from provisioner.cloud.views import describe_enis, describe_instances

_CHUNK: Final = 100
_GONE_STATES: Final = ("shutting-down", "terminated")


def _chunks(items: Sequence[str]) -> Iterator[list[str]]:
    for i in range(0, len(items), _CHUNK):
        yield list(items[i : i + _CHUNK])


def cni_description(instance_id: str) -> str:
    return f"{c.VPC_CNI_ENI_DESCRIPTION_PREFIX}{instance_id}"


def _record(ec2: Ec2Api, ids: Sequence[str]) -> list[NetworkInterfaceView]:
    """Secondary ENIs attached to ``ids`` that EC2 will not delete with the instance."""
    targets = set(ids)
    found: list[NetworkInterfaceView] = []
    for chunk in _chunks(ids):
        for eni in describe_enis(ec2, [{"Name": "attachment.instance-id", "Values": chunk}]):
            att = eni.attachment
            if (
                att is not None
                and att.instance_id in targets
                and not att.is_primary
                and not att.delete_on_termination
            ):
                found.append(eni)
    return found


def _recover(ec2: Ec2Api, ids: Sequence[str]) -> list[NetworkInterfaceView]:
    """VPC CNI ENIs named after one of ``ids`` and no longer attached to anything else."""
    targets = set(ids)
    wanted = {cni_description(i) for i in ids}
    found: list[NetworkInterfaceView] = []
    for chunk in _chunks([cni_description(i) for i in ids]):
        for eni in describe_enis(ec2, [{"Name": "description", "Values": chunk}]):
            if eni.description not in wanted:
                continue
            if eni.attachment is None or eni.attachment.instance_id in targets:
                found.append(eni)
    return found


def _scan(
    ec2: Ec2Api, ids: Sequence[str]
) -> tuple[list[NetworkInterfaceView], list[NetworkInterfaceView]]:
    """The ENIs a release of ``ids`` must delete, as (recorded, recovered): the secondaries
    attached to them that EC2 keeps, then the VPC CNI ENIs named after them not among those."""
    recorded = _record(ec2, ids)
    return recorded, _recover_beyond(ec2, ids, {e.eni_id for e in recorded})


def _recover_beyond(ec2: Ec2Api, ids: Sequence[str], known: set[str]) -> list[NetworkInterfaceView]:
    """The VPC CNI ENIs named after ``ids`` that are not already among ``known``."""
    return [e for e in _recover(ec2, ids) if e.eni_id not in known]


def leftover_enis(ec2: Ec2Api, instance_ids: Sequence[str]) -> list[NetworkInterfaceView]:
    """The ENIs a release of these instances would still delete: secondaries EC2 keeps after
    termination that are attached to them, and VPC CNI ENIs named after them, detached or
    attached to one of them. Empty once a release has finished."""
    ids = list(dict.fromkeys(instance_ids))
    if not ids:
        return []
    try:
        recorded, recovered = _scan(ec2, ids)
    except Exception as exc:
        raise to_cloud_error(exc, "Describing the ENIs a release would delete") from exc
    return recorded + recovered


def _terminate(ec2: Ec2Api, ids: Sequence[str]) -> None:
    for chunk in _chunks(ids):
        try:
            ec2.terminate_instances(InstanceIds=chunk)
        except Exception as exc:
            err = to_cloud_error(exc, "TerminateInstances")
            # Gone between our describe and this call: nothing left to terminate.
            if err.kind is not ErrorKind.NOT_FOUND:
                raise err from exc


def _delete(ec2: Ec2Api, eni_id: str) -> bool:
    """True when the ENI is gone afterwards; False when EC2 still holds it in use."""
    try:
        ec2.delete_network_interface(NetworkInterfaceId=eni_id)
    except Exception as exc:
        err = to_cloud_error(exc, f"DeleteNetworkInterface {eni_id}")
        if err.kind is ErrorKind.NOT_FOUND:
            return True
        if err.code in ("InvalidNetworkInterface.InUse", "InvalidParameterValue"):
            return False
        raise err from exc
    return True


def release(
    ec2: Ec2Api,
    clock: Clock,
    instance_ids: Sequence[str],
    *,
    eni_wait_seconds: float = 300.0,
    poll_seconds: float = 5.0,
) -> ReleaseReport:
    ids = list(dict.fromkeys(instance_ids))
    if not ids:
        return ReleaseReport((), (), (), (), (), (), ())
    try:
        states = {v.instance_id: v.state for v in describe_instances(ec2, ids)}
        recorded, recovered = _scan(ec2, ids)
    except Exception as exc:
        raise to_cloud_error(exc, "Describing the gang before release") from exc
    recorded_ids = {e.eni_id for e in recorded}
    to_terminate = [i for i in ids if i in states and states[i] not in _GONE_STATES]
    already_gone = [i for i in ids if i not in to_terminate]
    _terminate(ec2, to_terminate)
    # The VPC CNI may have attached an ENI between the scan above and our terminate. Once
    # the instances are shutting down EC2 refuses any new attachment, so one more scan by
    # description, after the terminate, finds every ENI the gang can ever leave behind.
    # Without a terminate of ours there was no such gap: the instances were already going.
    if to_terminate:
        try:
            recovered += _recover_beyond(ec2, ids, recorded_ids | {e.eni_id for e in recovered})
        except Exception as exc:
            raise to_cloud_error(exc, "Describing the gang's ENIs after terminating") from exc

    targets = set(ids)
    descriptions = {cni_description(i) for i in ids}
    allowed = recorded_ids | {e.eni_id for e in recovered}
    pending = sorted(allowed)
    deleted: list[str] = []
    deadline = clock.now().timestamp() + eni_wait_seconds
    while pending:
        try:
            current = {
                e.eni_id: e
                for chunk in _chunks(pending)
                for e in describe_enis(ec2, [{"Name": "network-interface-id", "Values": chunk}])
            }
        except Exception as exc:
            raise to_cloud_error(exc, "DescribeNetworkInterfaces during release") from exc
        still: list[str] = []
        for eni_id in pending:
            eni = current.get(eni_id)
            if eni is None:
                deleted.append(eni_id)  # someone (or an earlier pass) deleted it already
                continue
            if eni.attachment is not None and eni.attachment.instance_id not in targets:
                continue  # re-attached to another instance: no longer ours to touch
            detached = eni.attachment is None and eni.status == "available"
            ours = eni_id in recorded_ids or eni.description in descriptions
            if detached and ours and _delete(ec2, eni_id):
                deleted.append(eni_id)
            else:
                still.append(eni_id)
        pending = still
        if not pending or clock.now().timestamp() >= deadline:
            break
        clock.sleep(poll_seconds)
    return ReleaseReport(
        requested=tuple(ids),
        terminated=tuple(to_terminate),
        already_gone=tuple(already_gone),
        enis_recorded=tuple(sorted(recorded_ids)),
        enis_recovered=tuple(e.eni_id for e in recovered),
        enis_deleted=tuple(deleted),
        enis_pending=tuple(pending),
    )
