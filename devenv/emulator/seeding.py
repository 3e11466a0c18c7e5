"""Seeding (no patch): per region, the EKS-optimized AL2023 AMIs (one per Kubernetes version,
architecture and variant, with the matching architecture) and their SSM parameters under
`/aws/service/eks/optimized-ami/...`, plus one default subnet in every AZ.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, Final

from moto.core.utils import utcnow
from moto.ec2 import ec2_backends
from moto.ec2.models.amis import Ami
from moto.ssm.models import Parameter, ssm_backends

from devenv.emulator.model import EPOCH_ATTR, EmulatorInputError, RegionSeed

EKS_AMI_K8S_VERSIONS: Final = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36")
EKS_AMI_ARCHITECTURES: Final = ("x86_64", "arm64")
EKS_AMI_VARIANTS: Final = ("standard", "nvidia", "neuron")
# The account that publishes the EKS-optimized AMIs in most commercial regions.
EKS_AMI_OWNER_ID: Final = "602401143452"


def eks_ami_parameter_name(k8s_version: str, architecture: str, variant: str) -> str:
    """The SSM parameter EKS publishes for its recommended AL2023 node AMI."""
    return (
        f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/"
        f"{architecture}/{variant}/recommended/image_id"
    )


def eks_ami_id(region: str, k8s_version: str, architecture: str, variant: str) -> str:
    """The seeded AMI's id: derived from its coordinates, so it survives every reset."""
    digest = hashlib.sha256(f"{region}/{k8s_version}/{architecture}/{variant}".encode())
    return f"ami-0{digest.hexdigest()[:16]}"


def eks_ami_matrix() -> list[tuple[str, str, str]]:
    """(version, architecture, variant) of every seeded AMI; Neuron AMIs are x86_64 only."""
    return [
        (version, arch, variant)
        for version in EKS_AMI_K8S_VERSIONS
        for arch in EKS_AMI_ARCHITECTURES
        for variant in EKS_AMI_VARIANTS
        if not (variant == "neuron" and arch != "x86_64")
    ]


# --- seeding -----------------------------------------------------------------------------
def seed_ec2(backend: Any) -> RegionSeed:
    region = backend.region_name
    for version, arch, variant in eks_ami_matrix():
        ami_id = eks_ami_id(region, version, arch, variant)
        if ami_id not in backend.amis:
            backend.amis[ami_id] = _eks_ami(backend, ami_id, version, arch, variant)
    vpc = backend.get_default_vpc() or backend.create_default_vpc()
    subnets = backend.get_default_subnets()
    for zone in backend.describe_availability_zones():
        if zone.name not in subnets:
            subnets[zone.name] = backend.create_default_subnet(zone.name)
    backend.__dict__[EPOCH_ATTR] = uuid.uuid4().hex
    return RegionSeed(vpc_id=vpc.id, subnets={az: s.id for az, s in sorted(subnets.items())})


def _eks_ami(backend: Any, ami_id: str, version: str, arch: str, variant: str) -> Ami:
    return Ami(
        backend,
        ami_id,
        name=f"amazon-eks-node-al2023-{arch}-{variant}-{version}-v20250101",
        description=f"EKS-optimized node on Amazon Linux 2023 ({variant}, k8s: {version})",
        owner_id=EKS_AMI_OWNER_ID,
        owner_alias=EKS_AMI_OWNER_ALIAS,
        public=True,
        virtualization_type="hvm",
        architecture=arch,
        hypervisor="xen",
        root_device_type="ebs",
        root_device_name="/dev/xvda",
        region_name=f"{backend.region_name}a",
        boot_mode="uefi-preferred",
    )


# What DescribeImages' ImageOwnerAlias says of the EKS-optimized AMIs. "Image" (EC2 API
# Reference) lists the aliases (amazon | aws-backup-vault | aws-marketplace), and "Update
# organization controls for EKS Auto Mode" (EKS User Guide) says Amazon owns the EKS AMI
# accounts, their ec2:Owner always "amazon"; no page shows the field on an EKS-optimized
# AMI itself, so `set_eks_ami_owner_alias` can make the seeded ones answer without it.
EKS_AMI_OWNER_ALIAS: Final = "amazon"


def set_eks_ami_owner_alias(backend: Any, alias: str | None) -> int:
    """Give every seeded EKS AMI of `backend` this ImageOwnerAlias (None: none); returns how
    many were changed."""
    seeded = {eks_ami_id(backend.region_name, v, a, k) for v, a, k in eks_ami_matrix()}
    changed = 0
    for ami_id in seeded & set(backend.amis):
        backend.amis[ami_id].owner_alias = alias
        changed += 1
    return changed


def share_public_ami(account_id: str, region: str, owner_id: str, name: str) -> str:
    """Another account (`owner_id`) makes its AMI `name` public, and `account_id` sees it.

    As "Make your AMI publicly available" (EC2 User Guide) and DescribeImages ("EC2 API
    Reference") describe it: a public image is listed to every account with its owner's
    `OwnerId`; `ImageOwnerAlias` is given only for Amazon's own aliases (amazon,
    aws-marketplace, aws-backup-vault), so an ordinary account's image has none. The id is
    derived from owner and name, so a test can share the same image again after a reset.
    """
    if not (owner_id.isdigit() and len(owner_id) == 12):
        raise EmulatorInputError("owner_id", f"{owner_id!r} is not a 12-digit account id")
    backend = ec2_backends[account_id][region]
    digest = hashlib.sha256(f"public:{owner_id}:{name}".encode())
    ami_id = f"ami-0{digest.hexdigest()[:16]}"
    if ami_id not in backend.amis:
        backend.amis[ami_id] = Ami(
            backend,
            ami_id,
            name=name,
            description=f"public image shared by {owner_id}",
            owner_id=owner_id,
            owner_alias=None,
            public=True,
            virtualization_type="hvm",
            architecture="x86_64",
            hypervisor="xen",
            root_device_type="ebs",
            root_device_name="/dev/xvda",
            region_name=f"{region}a",
            boot_mode="uefi-preferred",
        )
    return ami_id


def publish_eks_ami(account_id: str, region: str, parameter: str, image_id: str) -> int:
    """EKS recommends `image_id` from now on under `parameter` (a new version of it, as
    AWS publishes a rotation); returns the version. Only AWS may write under /aws/."""
    parameters = ssm_backends[account_id][region]._parameters
    history = dict.get(parameters, parameter)
    if not history:
        raise EmulatorInputError("parameter", f"{parameter!r} is not a seeded EKS AMI parameter")
    latest = history[-1]
    history.append(
        Parameter(  # type: ignore[abstract]  # as seed_ssm builds it
            account_id=account_id,
            name=parameter,
            value=image_id,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=utcnow(),
            version=latest.version + 1,
            data_type="text",
        )
    )
    return int(latest.version + 1)


def seed_ssm(account_id: str, region: str) -> None:
    # moto refuses PutParameter under /aws/; its own loaders write the dict directly too.
    parameters = ssm_backends[account_id][region]._parameters
    for version, arch, variant in eks_ami_matrix():
        name = eks_ami_parameter_name(version, arch, variant)
        if dict.__contains__(parameters, name):
            continue
        dict.setdefault(parameters, name, []).append(
            Parameter(  # type: ignore[abstract]  # moto's own loaders build it the same way
                account_id=account_id,
                name=name,
                value=eks_ami_id(region, version, arch, variant),
                parameter_type="String",
                description=None,
                allowed_pattern=None,
                keyid=None,
                last_modified_date=utcnow(),
                version=1,
                data_type="text",
            )
        )
