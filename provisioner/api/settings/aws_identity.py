"""`aws`, `iam` and `ownership`: the endpoint the controller calls, what IAM it manages for
the nodes, and the key that proves an instance is one it launched."""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import Field, model_validator

from provisioner.api.settings.section import Section

__all__ = ["AwsSettings", "IamSettings", "OwnershipSettings", "SelfManagedOwnershipKey"]


class AwsSettings(Section):
    endpoint_url: str | None = Field(
        default=None, pattern=r"^https?://", description="EC2/EKS/SSM/IAM endpoint override."
    )


class IamSettings(Section):
    self_manage_instance_profile: bool = Field(
        default=False, description="Create the node instance profile instead of only verifying it."
    )
    manage_access_entry: bool = Field(
        default=False,
        description="Create the node role's EKS access entry instead of verifying it.",
    )


class SelfManagedOwnershipKey(Section):
    """The Secret the controller keeps the ownership key in (key `key`, 32 random bytes).
    The chart creates it empty; the controller fills it once and never rewrites it."""

    namespace: str = Field(min_length=1, description="The Secret's (the release's) namespace.")
    secret_name: str = Field(min_length=1, description="Secret holding the ownership key.")


class OwnershipSettings(Section):
    """How the controller proves an instance is one it launched (`cloud.ownership`)."""

    key_file: Path | None = Field(
        default=None,
        description=(
            "File holding this cluster's ownership key (at least 32 random bytes, e.g. a "
            "Secret mounted into the pod): launch tokens are signed with it, and only an "
            "instance whose token verifies is ever reaped once its pool is gone. Unset: "
            "tokens are unsigned and such orphans are reported, never terminated."
        ),
    )
    self_managed: SelfManagedOwnershipKey | None = Field(
        default=None,
        description=(
            "Keep the key in this Secret instead of keyFile (the chart's default): the "
            "controller generates it on first start and reads it back on every start."
        ),
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> Self:
        if self.key_file is not None and self.self_managed is not None:
            raise ValueError(
                "ownership.keyFile and ownership.selfManaged are mutually exclusive: the "
                "cluster has one ownership key; set keyFile for a key you provide, or "
                "selfManaged for one the controller keeps in a Secret, not both"
            )
        return self
