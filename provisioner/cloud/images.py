"""Who owns an AMI, as EC2 says: the `ImageOwners` port of `api.ami_policy`, over DescribeImages.

Called by the Job webhook (at `kubectl apply`) and by the pool's launch facts (before any
prepare or launch), both through `api.ami_policy.ami_problem`.

Two questions, both DescribeImages ("DescribeImages", EC2 API Reference):
- `ImageIds=[id]`: the image's `OwnerId` and `ImageOwnerAlias` (amazon, aws-marketplace,
  aws-backup-vault; absent for an ordinary account), or InvalidAMIID.NotFound.
- only when `self` is allowed and the owner matched nothing else: `Owners=["self"]` with an
  `image-id` filter, so EC2 itself says whether the caller's account owns it (the
  controller need not know its account id).

An AMI's owner is fixed when it is registered (copying makes a new id), so answers are kept
for the life of the process; a missing image or an error is never kept.
"""

from __future__ import annotations

import threading
from typing import Final

from provisioner.api.ami_policy import ImageLookupError, ImageOwners, ImageOwnership
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import CloudError, ErrorKind, error_code, to_cloud_error
from provisioner.cloud.types import RootDevice

__all__ = ["Ec2ImageOwners", "root_device_of"]

_NOT_FOUND: Final = frozenset({"InvalidAMIID.NotFound", "InvalidAMIID.Malformed"})
_SELF: Final = "self"
_KEPT: Final = 4096


class Ec2ImageOwners(ImageOwners):
    """`ImageOwners` answered by EC2, with each image's owner kept once read."""

    def __init__(self, ec2: Ec2Api) -> None:
        self._ec2 = ec2
        self._lock = threading.Lock()
        self._owners: dict[str, tuple[str, str | None]] = {}
        self._self_owned: dict[str, bool] = {}

    def ownership(self, image_id: str, owners: tuple[str, ...]) -> ImageOwnership | None:
        found = self._owner(image_id)
        if found is None:
            return None
        owner_id, alias = found
        allowed_as: str | None = None
        if owner_id in owners:
            allowed_as = owner_id
        elif alias is not None and alias in owners:
            allowed_as = alias
        elif _SELF in owners and self._owned_by_caller(image_id):
            allowed_as = _SELF
        return ImageOwnership(image_id, owner_id, alias, allowed_as)

    def _owner(self, image_id: str) -> tuple[str, str | None] | None:
        with self._lock:
            kept = self._owners.get(image_id)
        if kept is not None:
            return kept
        try:
            images = self._ec2.describe_images(ImageIds=[image_id]).get("Images") or []
        except Exception as exc:
            if error_code(exc) in _NOT_FOUND:
                return None
            raise ImageLookupError(f"{error_code(exc) or type(exc).__name__}") from exc
        # A deregistered image is answered with no record (or state deregistered).
        live = [i for i in images if i.get("ImageId") == image_id and i.get("OwnerId")]
        if not live or live[0].get("State") == "deregistered":
            return None
        answer = (str(live[0]["OwnerId"]), live[0].get("ImageOwnerAlias") or None)
        with self._lock:
            if len(self._owners) < _KEPT:
                self._owners[image_id] = answer
        return answer

    def _owned_by_caller(self, image_id: str) -> bool:
        with self._lock:
            kept = self._self_owned.get(image_id)
        if kept is not None:
            return kept
        try:
            images = self._ec2.describe_images(
                Owners=[_SELF], Filters=[{"Name": "image-id", "Values": [image_id]}]
            ).get("Images")
        except Exception as exc:
            raise ImageLookupError(f"{error_code(exc) or type(exc).__name__}") from exc
        mine = any(i.get("ImageId") == image_id for i in images or [])
        with self._lock:
            if len(self._self_owned) < _KEPT:
                self._self_owned[image_id] = mine
        return mine


def root_device_of(ec2: Ec2Api, image_id: str) -> RootDevice:
    """The AMI's root device ("DescribeImages", EC2 API Reference: ``RootDeviceName`` and
    the ``BlockDeviceMappings`` entry of that device). A root volume set in the launch
    template must name this device, or EC2 adds a second volume and boots from the AMI's.
    """
    try:
        images = ec2.describe_images(ImageIds=[image_id]).get("Images") or []
    except Exception as exc:
        raise to_cloud_error(exc, f"DescribeImages {image_id} (its root device)") from exc
    found = next((i for i in images if i.get("ImageId") == image_id), None)
    name = str((found or {}).get("RootDeviceName") or "")
    if not name:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "NoRootDevice",
            f"EC2 reports no root device for {image_id}, so instances.rootVolume cannot be "
            "placed on it; unset instances.rootVolume or use an EBS-backed AMI.",
        )
    size: int | None = None
    for mapping in (found or {}).get("BlockDeviceMappings") or ():
        if mapping.get("DeviceName") == name and (mapping.get("Ebs") or {}).get("VolumeSize"):
            size = int(mapping["Ebs"]["VolumeSize"])
    return RootDevice(image_id, name, size)
