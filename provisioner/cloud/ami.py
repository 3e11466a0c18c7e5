"""Which AMI gang nodes boot: an explicit id, else the EKS-optimized AL2023 image from SSM.

Called by the GangNodePool reconciler (through ``Ec2Engine.resolve_ami``) while it builds the
pool's launch template and launch spec. The SSM path is
``/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<arch>/<variant>/recommended/image_id``
where the architecture comes from DescribeInstanceTypes.
"""

from __future__ import annotations

from provisioner.api import constants as c
from provisioner.cloud.ec2api import Ec2Api, SsmApi
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
from provisioner.cloud.instancetypes import describe_instance_type
from provisioner.cloud.types import AmiChoice, Architecture, InstanceTypeInfo


def ami_parameter_name(k8s_version: str, architecture: Architecture, variant: str) -> str:
    if variant not in c.AMI_VARIANTS:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "InvalidAmiVariant",
            f"AMI variant {variant!r} is not one of {', '.join(c.AMI_VARIANTS)}; fix "
            f"{c.ANN_AMI_VARIANT}.",
        )
    return (
        f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/"
        f"{architecture}/{variant}/recommended/image_id"
    )


def pick_architecture(instance_type: str, supported: tuple[str, ...]) -> Architecture:
    """The AL2023 image line for a type: x86_64 where offered (covers i386+x86_64), else arm64."""
    if "x86_64" in supported:
        return "x86_64"
    if "arm64" in supported:
        return "arm64"
    raise CloudError(
        ErrorKind.CONFIG,
        None,
        "UnsupportedArchitecture",
        f"Instance type {instance_type} supports {list(supported)}, and EKS AL2023 AMIs exist "
        "only for x86_64 and arm64; choose another instance type.",
    )


def resolve_ami(
    ssm: SsmApi,
    ec2: Ec2Api,
    *,
    k8s_version: str,
    instance_type: str,
    variant: str,
    explicit_ami_id: str | None = None,
    instance_type_info: InstanceTypeInfo | None = None,
) -> AmiChoice:
    """The AMI; `instance_type_info` is DescribeInstanceTypes' answer if the caller has it."""
    if explicit_ami_id:
        return AmiChoice(ami_id=explicit_ami_id, source="explicit")
    info = instance_type_info
    if info is None or info.instance_type != instance_type:
        info = describe_instance_type(ec2, instance_type)
    arch = pick_architecture(instance_type, info.architectures)
    name = ami_parameter_name(k8s_version, arch, variant)
    try:
        value = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except Exception as exc:
        err = to_cloud_error(exc, f"GetParameter {name}")
        if err.code == "ParameterNotFound":
            raise CloudError(
                ErrorKind.CONFIG,
                err.code,
                "AmiParameterNotFound",
                f"No EKS-optimized AL2023 AMI is published at {name} (Kubernetes "
                f"{k8s_version}, {arch}, {variant}); set {c.ANN_AMI_ID} or a different "
                f"{c.ANN_AMI_VARIANT}.",
            ) from exc
        raise err from exc
    return AmiChoice(ami_id=str(value), source="ssm", parameter_name=name, architecture=arch)
