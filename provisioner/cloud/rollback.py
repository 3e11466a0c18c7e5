"""The N-or-0 guard: a set of instances that is not exactly N is terminated at once.

Called by both launchers on EC2's answer, and by the engine when it finds a partial set of
the current generation already running. Termination comes before anything else (no tag,
no persist), because every second a partial set lives, it bills.

A rollback is done only when EC2, asked by id, shows every instance shutting-down or
terminated ("Eventual consistency in the Amazon EC2 API": right after a launch, NotFound by
id, or from TerminateInstances, proves nothing; the instance may still run). The ids are
fresh from a launch answer, so NotFound is never taken as gone here. What is not confirmed
after a second terminate rides on the error (``CloudError.instance_ids``); the pool keeps
those ids in its status and its next pass releases them, with the release's bounded wait.

What it did terminate rides on the error too (``CloudError.rolled_back``): terminating is
not the whole of a release. A set rolled back seconds or minutes after its launch (adopted
after a crash, answered again to a replayed token) may have nodes that joined, and the VPC
CNI's ENI of a joined node has DeleteOnTermination=false: it outlives the instance and
bills as an address held in the subnet. Only the release (``release.release``) finds and
deletes those, waiting for EC2 to detach them, which the launch path has no clock for; so
the pool releases the rolled-back ids by id on its next pass as well.
"""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
from provisioner.cloud.release import terminate, unconfirmed

# Terminate, then describe by id: once, and once more for what is not yet shown going. No
# sleep: the launch path holds no clock, and every second here bills; a longer wait is the
# pool's release's, which runs on its own clock.
_TRIES = 2


def terminate_all(ec2: Ec2Api, instance_ids: Sequence[str]) -> tuple[tuple[str, ...], str | None]:
    """Terminate every id; the ids EC2 does not yet show going, and what went wrong."""
    pending = list(dict.fromkeys(instance_ids))
    failure: str | None = None
    for _ in range(_TRIES):
        try:
            terminate(ec2, pending)
            pending = unconfirmed(ec2, pending)
        except Exception as exc:
            failure = to_cloud_error(exc, "TerminateInstances").message
        if not pending:
            return (), None
    return tuple(pending), failure


def roll_back(
    ec2: Ec2Api,
    instance_ids: Sequence[str],
    *,
    kind: ErrorKind,
    code: str | None,
    reason: str,
    message: str,
) -> CloudError:
    """Terminate ``instance_ids`` and return the error to raise; instances not confirmed
    terminating are named in the message and ride on the error, for the pool to release."""
    ids = tuple(dict.fromkeys(instance_ids))
    if not ids:
        return CloudError(kind, code, reason, message)
    left, failure = terminate_all(ec2, ids)
    gone = tuple(i for i in ids if i not in left)
    if not left:
        return CloudError(
            kind,
            code,
            reason,
            f"{message} All {len(ids)} were terminated (EC2 shows each shutting down).",
            rolled_back=gone,
        )
    why = failure or "EC2 does not yet show them shutting down"
    return CloudError(
        kind,
        code,
        reason,
        f"{message} Termination of {', '.join(left)} is not confirmed ({why}); they may "
        "still run, so the pool keeps their ids and releases them.",
        instance_ids=left,
        rolled_back=gone,
    )
