"""Whether a Job may boot the AMI it names (atomic-gang.k8s.aws/ami-id): the rule and its words.

A Job's image boots as a cluster node holding the node role's credentials, so the installer's
`amiPolicy` decides which images a Job may name: those EC2 says one of `allowedOwners` owns,
or whose id is in `allowedImageIds`. Ownership is EC2's answer (DescribeImages), read through
the `ImageOwners` port: the webhook asks at `kubectl apply`, and the pool asks again before
it prepares or launches anything (the webhook may be off, or fail open), with the same
sentences. An AMI's owner never changes, so an answer may be kept for the life of a process.

This module does no I/O; `provisioner.cloud.images` answers the port from EC2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from provisioner.api import constants as c
from provisioner.api.problems import Problem
from provisioner.api.settings import AmiPolicy

__all__ = ["ImageLookupError", "ImageOwners", "ImageOwnership", "ami_problem"]

REASON_AMI_UNVERIFIED: Final = "AmiOwnerUnverified"
REASON_AMI_NOT_ALLOWED: Final = "AmiNotAllowed"


@dataclass(frozen=True)
class ImageOwnership:
    """EC2's record of one image: its owner account, its owner alias (amazon,
    aws-marketplace, …; None for an ordinary account) and which allowed owner, if any,
    EC2 lists it under (self included)."""

    image_id: str
    owner_id: str
    owner_alias: str | None
    allowed_as: str | None


class ImageLookupError(Exception):
    """EC2 could not say who owns the image (throttled, unreachable, access denied)."""


class ImageOwners(Protocol):
    def ownership(self, image_id: str, owners: tuple[str, ...]) -> ImageOwnership | None:
        """EC2's record of `image_id` with the entry of `owners` that owns it, or None when
        EC2 knows no such image; raises `ImageLookupError` when EC2 does not answer."""
        ...


def _accepted(policy: AmiPolicy) -> str:
    owners = ", ".join(policy.allowed_owners) or "none"
    ids = f" or one of amiPolicy.allowedImageIds ({', '.join(policy.allowed_image_ids)})"
    return (
        f"an AMI owned by one of amiPolicy.allowedOwners ({owners})"
        f"{ids if policy.allowed_image_ids else ''}; leave it unset for the EKS-optimized "
        "AMI, or ask the installer to add the AMI to amiPolicy.allowedImageIds"
    )


def ami_problem(image_id: str, policy: AmiPolicy, images: ImageOwners | None) -> Problem | None:
    """None when a Job may boot `image_id`; otherwise the refusal, naming the setting.

    With no way to ask EC2 (`images` None) only `allowedImageIds` can admit an image:
    an owner that cannot be checked is not trusted.
    """
    if image_id in policy.allowed_image_ids:
        return None

    def refuse(detail: str, reason: str = c.REASON_NOT_ALLOWED) -> Problem:
        return Problem(
            key=c.ANN_AMI_ID,
            value=image_id,
            reason=reason,
            detail=detail,
            accepted=_accepted(policy),
        )

    if not policy.allowed_owners:
        return refuse("amiPolicy.allowedOwners is empty and the id is not in allowedImageIds")
    if images is None:
        return refuse(
            "its owner cannot be checked here (no EC2 access), and only "
            "amiPolicy.allowedImageIds is trusted without it",
            REASON_AMI_UNVERIFIED,
        )
    try:
        record = images.ownership(image_id, policy.allowed_owners)
    except ImageLookupError as err:
        return refuse(
            f"EC2 DescribeImages could not say who owns it ({err}); try again, and nothing "
            "is launched until it can",
            REASON_AMI_UNVERIFIED,
        )
    if record is None:
        return refuse("EC2 knows no such image in the cluster's region")
    if record.allowed_as is not None:
        return None
    owner = record.owner_id + (f" (alias {record.owner_alias})" if record.owner_alias else "")
    return refuse(f"it is owned by {owner}, which amiPolicy.allowedOwners does not include")
