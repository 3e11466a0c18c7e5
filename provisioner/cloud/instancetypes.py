"""What EC2 says about an instance type: architecture (for the AMI) and EFA (for networking).

Called by ``ami.resolve_ami`` and by the runinstances launcher when a gang asks for EFA.
"""

from __future__ import annotations

from typing import Any

from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
from provisioner.cloud.types import InstanceTypeInfo


def describe_instance_type(ec2: Ec2Api, instance_type: str) -> InstanceTypeInfo:
    try:
        found = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
    except Exception as exc:
        err = to_cloud_error(exc, f"DescribeInstanceTypes {instance_type}")
        if err.code in ("InvalidInstanceType", "InvalidParameterValue"):
            raise CloudError(
                ErrorKind.CONFIG,
                err.code,
                "UnknownInstanceType",
                f"EC2 does not know instance type {instance_type!r} in this region; fix "
                "atomic-gang.k8s.aws/instance-type.",
            ) from exc
        raise err from exc
    if not found:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "UnknownInstanceType",
            f"EC2 does not know instance type {instance_type!r} in this region; fix "
            "atomic-gang.k8s.aws/instance-type.",
        )
    return instance_type_info_from(found[0])


def instance_type_info_from(raw: dict[str, Any]) -> InstanceTypeInfo:
    net = raw.get("NetworkInfo") or {}
    efa = bool(net.get("EfaSupported"))
    cards = sorted(int(card.get("NetworkCardIndex", 0)) for card in net.get("NetworkCards") or ())
    return InstanceTypeInfo(
        instance_type=str(raw["InstanceType"]),
        architectures=tuple((raw.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ()),
        efa_supported=efa,
        max_efa_interfaces=int((net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0))
        if efa
        else 0,
        network_card_indexes=tuple(cards) or (0,),
    )
