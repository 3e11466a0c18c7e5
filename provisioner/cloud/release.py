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

An instance counts as gone only when EC2, asked BY ID, lists it shutting-down or terminated
(DESIGN §10). "Eventual consistency in the Amazon EC2 API": NotFound right after a launch
does not mean the instance does not exist, TerminateInstances answering NotFound does not
mean it was or will be terminated, and a filtered listing may miss a fresh launch. So a
terminate that answers NotFound is retried, never counted, and after terminating the ids
are described by id (bounded, on the injected clock) until each shows shutting-down or
terminated. What is not confirmed is reported in ``unconfirmed``: the caller keeps the ids
and releases them again. NotFound by id does become proof in one case: EC2 drops an
instance from its answers about an hour after it terminated ("TerminateInstances": terminated
instances remain visible for approximately one hour), so an id the caller has known for
longer than ``NOT_FOUND_IS_GONE_AFTER`` (``known_since``) and that EC2 still does not know is
one that terminated long ago, not one still propagating: that page tells callers to back off
"up to a few minutes", and the bound is well past it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Final

from provisioner.api import constants as c
from provisioner.api.clock import Clock
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import ErrorKind, to_cloud_error
from provisioner.cloud.types import InstanceView, NetworkInterfaceView, ReleaseReport
from provisioner.cloud.views import describe_by_id, describe_enis

_CHUNK: Final = 100
_GONE_STATES: Final = ("shutting-down", "terminated")
# How long an id must have been known before NotFound by id is read as "terminated long ago"
# (see the module docstring): past EC2's propagation ("a few minutes"), far under the hour
# a terminated instance stays listed.
NOT_FOUND_IS_GONE_AFTER: Final = timedelta(minutes=10)


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


def terminate(ec2: Ec2Api, ids: Sequence[str]) -> None:
    """Ask EC2 to terminate every id. NotFound counts for nothing (the caller confirms by
    describing); EC2 terminates none of a request that names one id it does not know
    ("TerminateInstances"), so such a chunk is asked again one id at a time."""
    for chunk in _chunks(ids):
        if not _terminate_call(ec2, chunk) and len(chunk) > 1:
            for instance_id in chunk:
                _terminate_call(ec2, [instance_id])


def _terminate_call(ec2: Ec2Api, ids: list[str]) -> bool:
    """False when EC2 answered NotFound (nothing terminated; maybe not yet propagated)."""
    try:
        ec2.terminate_instances(InstanceIds=ids)
    except Exception as exc:
        err = to_cloud_error(exc, "TerminateInstances")
        if err.kind is not ErrorKind.NOT_FOUND:
            raise err from exc
        return False
    return True


def is_gone(
    view: InstanceView | None, *, known_since: datetime | None, now: datetime | None = None
) -> bool:
    """Whether EC2's answer BY ID proves the instance is gone (see the module docstring)."""
    if view is None:
        if known_since is None or now is None:
            return False
        return now - known_since >= NOT_FOUND_IS_GONE_AFTER
    return view.state in _GONE_STATES


def unconfirmed(
    ec2: Ec2Api,
    ids: Sequence[str],
    *,
    known_since: datetime | None = None,
    now: datetime | None = None,
) -> list[str]:
    """The ids EC2, asked by id now, does not show shutting-down or terminated."""
    seen = describe_by_id(ec2, ids)
    return [i for i in ids if not is_gone(seen[i], known_since=known_since, now=now)]


def _confirm(
    ec2: Ec2Api,
    clock: Clock,
    ids: Sequence[str],
    *,
    known_since: datetime | None,
    wait_seconds: float,
    poll_seconds: float,
) -> list[str]:
    """Describe by id until every id shows shutting-down or terminated, terminating again
    what does not, for at most ``wait_seconds``; what is still not confirmed."""
    pending = list(ids)
    deadline = clock.now().timestamp() + wait_seconds
    while pending:
        pending = unconfirmed(ec2, pending, known_since=known_since, now=clock.now())
        if not pending or clock.now().timestamp() >= deadline:
            break
        clock.sleep(poll_seconds)
        terminate(ec2, pending)
    return pending


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
    known_since: datetime | None = None,
    eni_wait_seconds: float = 300.0,
    poll_seconds: float = 5.0,
    confirm_wait_seconds: float = 60.0,
    described: Mapping[str, InstanceView | None] | None = None,
) -> ReleaseReport:
    """Terminate ``instance_ids`` and delete the ENIs they leave; ``known_since``: when the
    caller last knew them all to exist (a release's start; None: just now); ``described``:
    what `describe_by_id` answered the caller for every one of them just before (None: it
    is asked here)."""
    ids = list(dict.fromkeys(instance_ids))
    if not ids:
        return ReleaseReport((), (), (), (), (), (), ())
    try:
        if described is None or not set(ids) <= described.keys():
            described = describe_by_id(ec2, ids)
        seen = described
        recorded, recovered = _scan(ec2, ids)
    except Exception as exc:
        raise to_cloud_error(exc, "Describing the gang before release") from exc
    recorded_ids = {e.eni_id for e in recorded}
    now = clock.now()
    already_gone = [i for i in ids if is_gone(seen[i], known_since=known_since, now=now)]
    # An id EC2 does not know yet is terminated too: the terminate path may know it.
    to_terminate = [i for i in ids if i not in already_gone]
    terminate(ec2, to_terminate)
    try:
        left = _confirm(
            ec2,
            clock,
            to_terminate,
            known_since=known_since,
            wait_seconds=confirm_wait_seconds,
            poll_seconds=poll_seconds,
        )
    except Exception as exc:
        raise to_cloud_error(exc, "Confirming the gang's termination") from exc
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
        terminated=tuple(i for i in to_terminate if i not in left),
        already_gone=tuple(already_gone),
        enis_recorded=tuple(sorted(recorded_ids)),
        enis_recovered=tuple(e.eni_id for e in recovered),
        enis_deleted=tuple(deleted),
        enis_pending=tuple(pending),
        unconfirmed=tuple(left),
    )
