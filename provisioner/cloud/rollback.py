"""The N-or-0 guard: a set of instances that is not exactly N is terminated at once.

Called by both launchers on EC2's answer, and by the engine when it finds a partial set of
the current generation already running. Termination comes before anything else (no tag,
no describe, no persist), because every second a partial set lives, it bills.
"""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error

_CHUNK = 500


def terminate_all(ec2: Ec2Api, instance_ids: Sequence[str]) -> str | None:
    """Terminate every id; None on success, else what went wrong (the ids may still live)."""
    ids = list(dict.fromkeys(instance_ids))
    for i in range(0, len(ids), _CHUNK):
        try:
            ec2.terminate_instances(InstanceIds=ids[i : i + _CHUNK])
        except Exception as exc:
            err = to_cloud_error(exc, "TerminateInstances")
            if err.kind is not ErrorKind.NOT_FOUND:
                return err.message
    return None


def roll_back(
    ec2: Ec2Api,
    instance_ids: Sequence[str],
    *,
    kind: ErrorKind,
    code: str | None,
    reason: str,
    message: str,
) -> CloudError:
    """Terminate ``instance_ids`` and return the error to raise; a failed termination is
    named in the message and the ids ride on the error so the caller can release them."""
    ids = tuple(dict.fromkeys(instance_ids))
    if not ids:
        return CloudError(kind, code, reason, message)
    failure = terminate_all(ec2, ids)
    if failure is None:
        return CloudError(kind, code, reason, f"{message} All {len(ids)} were terminated.")
    return CloudError(
        kind,
        code,
        reason,
        f"{message} Terminating them failed and must be retried by a release: {failure}",
        instance_ids=ids,
    )
