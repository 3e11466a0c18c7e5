"""`instances`: what a company's rules ask of every resource the controller creates (extra
tags, the root volume)."""

from __future__ import annotations

import re
from typing import Any, Final, Literal, Self

from pydantic import Field, field_validator, model_validator

from provisioner.api import constants as c
from provisioner.api.settings.section import Section

__all__ = [
    "CONTROLLER_TAGS_PER_INSTANCE",
    "EC2_TAGS_PER_RESOURCE",
    "EC2_TAG_KEY_MAX",
    "EC2_TAG_VALUE_MAX",
    "RESERVED_TAG_PREFIXES",
    "ROOT_VOLUME_TYPES",
    "Instances",
    "RootVolume",
]

# "Tag your Amazon EC2 resources" (Amazon EC2 User Guide), "Tag restrictions": at most 50
# user tags per resource, keys of 1-128 and values of 0-256 Unicode characters, and the
# aws: prefix (in any case) reserved for AWS in keys and values.
EC2_TAGS_PER_RESOURCE: Final = 50
EC2_TAG_KEY_MAX: Final = 128
EC2_TAG_VALUE_MAX: Final = 256
# The controller's own tags on a gang instance (cloud.tags.launch_tags): managed, cluster,
# pool, group, max-lifetime, keep-warm-until and the cluster ownership key.
CONTROLLER_TAGS_PER_INSTANCE: Final = 7
# Keys the controller's ownership and the cluster's identity rest on: an installer's tag
# with one of these prefixes could move a resource into or out of a pool or a cluster.
RESERVED_TAG_PREFIXES: Final = (c.PREFIX, "kubernetes.io/cluster/")
# "Amazon EBS volume types" (Amazon EBS User Guide): st1 and sc1 cannot be boot volumes;
# io1/io2 need a provisioned IOPS figure; throughput is set on gp3 only.
ROOT_VOLUME_TYPES: Final = ("gp3", "gp2", "io1", "io2")
_GIB: Final = re.compile(r"^([0-9]+)(Gi)?$")


class RootVolume(Section):
    """The gang nodes' root EBS volume, set in the pool's launch template on the AMI's own
    root device (DescribeImages' RootDeviceName). Deleted with its instance."""

    volume_size: int = Field(
        ge=1,
        le=65536,
        description='Root volume size: GiB, written "200Gi" (as Karpenter does) or 200.',
    )
    volume_type: Literal["gp3", "gp2", "io1", "io2"] = Field(
        default="gp3", description="EBS volume type; st1/sc1 cannot boot, so are refused."
    )
    iops: int | None = Field(
        default=None,
        ge=100,
        description="Provisioned IOPS: required for io1/io2, optional for gp3.",
    )
    throughput: int | None = Field(
        default=None, ge=125, description="MiB/s, gp3 only (default 125)."
    )

    @field_validator("volume_size", mode="before")
    @classmethod
    def _gibibytes(cls, v: Any) -> Any:
        if isinstance(v, str):
            match = _GIB.match(v.strip())
            if not match:
                raise ValueError(
                    f'instances.rootVolume.volumeSize {v!r} is not a size in GiB such as "200Gi"'
                )
            return int(match.group(1))
        return v

    @model_validator(mode="after")
    def _type_rules(self) -> Self:
        where = "instances.rootVolume"
        if self.volume_type in ("io1", "io2") and self.iops is None:
            raise ValueError(
                f"{where}.iops is required for volumeType {self.volume_type} (provisioned "
                "IOPS volumes), e.g. iops: 16000"
            )
        if self.volume_type == "gp2" and self.iops is not None:
            raise ValueError(
                f"{where}.iops cannot be set for gp2 (its IOPS follow its size); use gp3"
            )
        if self.throughput is not None and self.volume_type != "gp3":
            raise ValueError(f"{where}.throughput is a gp3 setting; remove it or use gp3")
        return self


class Instances(Section):
    """What the installer's company rules ask of everything the controller creates.

    `extraTags` go on every resource the controller creates: the launch template, the
    placement group, the instance profile and access entry it manages, and each gang
    instance with its volumes and network interfaces. Organisations that deny untagged
    launches (a service control policy requiring, say, `CostCenter`) are satisfied here.
    `rootVolume` sizes the nodes' root volume; unset, the AMI's own mapping is used.
    """

    extra_tags: dict[str, str] = Field(
        default_factory=dict,
        description="Tags added to every resource the controller creates (the chart's `tags`).",
    )
    root_volume: RootVolume | None = Field(
        default=None,
        description="The nodes' root volume (the chart's `rootVolume`); unset keeps the AMI's.",
    )

    @field_validator("extra_tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        where = "instances.extraTags"
        page = '("Tag your Amazon EC2 resources", Tag restrictions)'
        room = EC2_TAGS_PER_RESOURCE - CONTROLLER_TAGS_PER_INSTANCE
        if len(v) > room:
            raise ValueError(
                f"{where} has {len(v)} tags; EC2 allows {EC2_TAGS_PER_RESOURCE} per resource "
                f"and the controller writes {CONTROLLER_TAGS_PER_INSTANCE} of its own, so at "
                f"most {room} fit {page}"
            )
        for key, value in v.items():
            if not key or len(key) > EC2_TAG_KEY_MAX:
                raise ValueError(
                    f"{where} key {key!r} must be 1-{EC2_TAG_KEY_MAX} characters {page}"
                )
            if len(value) > EC2_TAG_VALUE_MAX:
                raise ValueError(
                    f"{where}[{key!r}] value is {len(value)} characters; EC2 allows at most "
                    f"{EC2_TAG_VALUE_MAX} {page}"
                )
            if key.lower().startswith("aws:") or value.lower().startswith("aws:"):
                raise ValueError(
                    f"{where}[{key!r}]: the aws: prefix is reserved for AWS in tag keys and "
                    f"values and EC2 refuses it {page}; rename the tag"
                )
            if key.startswith(RESERVED_TAG_PREFIXES):
                raise ValueError(
                    f"{where} key {key!r} uses a prefix the controller's own ownership and "
                    f"cluster tags use ({', '.join(RESERVED_TAG_PREFIXES)}): it could move a "
                    "resource into or out of a pool or a cluster; choose another key"
                )
        return v
