"""An instance's root volume where EC2 puts it: on the AMI's root device.

"Block device mappings for volumes on Amazon EC2 instances" (Amazon EC2 User Guide): an
instance gets the AMI's block device mapping, and a launch's own mapping (the request's or
its launch template's) for a device the AMI maps replaces the AMI's entry; the root volume
is the one at the AMI's root device (DescribeImages' RootDeviceName). moto instead attaches
an 8 GiB volume at /dev/sda1 whatever the AMI says, and adds the launch's mappings beside
it, so a template that resizes the root would show two disks and boot from neither.

`settle_root_volume` runs on each launched instance (`launch.decorate`): moto's default
volume moves to the AMI's root device at the AMI's root size, or, when the launch mapped the
root device itself, is deleted, leaving the launch's volume as the root.
"""

from __future__ import annotations

from typing import Any, Final

# Where moto attaches its default volume (`Instance.setup_defaults`).
MOTO_DEFAULT_DEVICE: Final = "/dev/sda1"


def _root_size(image: Any) -> int | None:
    for mapping in image.block_device_mappings:
        if mapping.get("DeviceName") == image.root_device_name:
            size = (mapping.get("Ebs") or {}).get("VolumeSize")
            return int(size) if size else None
    return None


def settle_root_volume(backend: Any, instance: Any) -> None:
    image = backend.amis.get(instance.image_id)
    if image is None or image.root_device_name == MOTO_DEFAULT_DEVICE:
        return
    devices = instance.block_device_mapping
    default = devices.get(MOTO_DEFAULT_DEVICE)
    if default is None:
        return
    root = image.root_device_name
    backend.detach_volume(default.volume_id, instance.id, MOTO_DEFAULT_DEVICE)
    if root in devices:
        # The launch mapped the root device: its volume is the root, moto's default goes.
        backend.delete_volume(default.volume_id)
        return
    volume = backend.get_volume(default.volume_id)
    volume.size = _root_size(image) or volume.size
    backend.attach_volume(default.volume_id, instance.id, root, delete_on_termination=True)
