"""`amiPolicy`: which AMIs a Job may name (atomic-gang.k8s.aws/ami-id); the rule that reads
it is `provisioner.api.ami_policy`."""

from __future__ import annotations

import re
from typing import Final

from pydantic import Field, field_validator

from provisioner.api.fields import AMI_PATTERN
from provisioner.api.settings.section import Section

__all__ = ["AMI_OWNER_ALIASES", "AmiPolicy"]

# The owner aliases DescribeImages' Owners accepts besides account ids ("DescribeImages",
# EC2 API Reference): "self" is the caller's own account.
AMI_OWNER_ALIASES: Final = ("self", "amazon", "aws-marketplace", "aws-backup-vault")
_ACCOUNT_ID = re.compile(r"^[0-9]{12}$")
_IMAGE_ID = re.compile(AMI_PATTERN)


class AmiPolicy(Section):
    """Which AMIs a Job may boot with the node role through its ami-id annotation.

    An image boots as a cluster node with the node role's credentials, so a Job's AMI is
    accepted only when EC2 says one of `allowedOwners` owns it, or its id is listed in
    `allowedImageIds`. The default, Amazon's images (the owner alias EC2 gives the
    EKS-optimized AMIs) and the account's own, excludes community and Marketplace images.
    The AMI the controller picks itself (EKS's SSM parameter) is not a Job's choice and is
    not checked here.
    """

    allowed_owners: tuple[str, ...] = Field(
        default=("amazon", "self"),
        description="AMI owners a Job's ami-id may come from: 12-digit account ids, or the "
        "aliases self, amazon, aws-marketplace, aws-backup-vault; empty allows none.",
    )
    allowed_image_ids: tuple[str, ...] = Field(
        default=(), description="AMI ids a Job may name whoever owns them."
    )

    @field_validator("allowed_owners")
    @classmethod
    def _owners(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [o for o in v if o not in AMI_OWNER_ALIASES and not _ACCOUNT_ID.match(o)]
        if bad:
            raise ValueError(
                f"amiPolicy.allowedOwners entries {bad} are neither 12-digit account ids nor "
                f"one of {', '.join(AMI_OWNER_ALIASES)}"
            )
        return v

    @field_validator("allowed_image_ids")
    @classmethod
    def _image_ids(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [i for i in v if not _IMAGE_ID.match(i)]
        if bad:
            raise ValueError(
                f"amiPolicy.allowedImageIds entries {bad} are not AMI ids such as "
                '"ami-0123456789abcdef0"'
            )
        return v
