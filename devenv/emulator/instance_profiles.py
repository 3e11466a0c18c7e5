"""The instance profile a launch names, as EC2 answers for one it does not know.

moto checks a RunInstances' own ``IamInstanceProfile`` against IAM and answers with IAM's
``NoSuchEntity``, a code EC2 never returns, and does not look at a launch template's
profile, nor at an instant fleet's. EC2 answers ``InvalidParameterValue`` ("Error codes
for the Amazon EC2 API") with "Value (<name>) for parameter iamInstanceProfile.name is
invalid. Invalid IAM Instance Profile name" for a profile named by name, and "... for
parameter iamInstanceProfile.arn is invalid. Invalid IAM Instance Profile ARN" for one named
by ARN (as the pool's launch template names it). The wording is not on an AWS page: it is
taken from users' reports of EC2's answer, and Karpenter's AWS provider matches the same
phrase. An instant fleet lists that answer per override in its ``Errors`` and launches
nothing (as Karpenter's users report it from CreateFleet).

The profile is looked up in the account's IAM as it is now: EC2's view of a profile made a
moment ago may lag (IAM is eventually consistent), which `set_lag` models: a profile made
less than `lag` seconds ago is not known to EC2 yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from moto.ec2.exceptions import EC2ClientError
from moto.iam.models import iam_backends

from devenv.emulator.model import EmulatorInputError

__all__ = ["ProfileVisibility", "profile_refusal", "refuse_unknown_profile"]

CODE = "InvalidParameterValue"


class ProfileVisibility:
    """How long after its creation EC2 does not see an instance profile (0: at once)."""

    def __init__(self) -> None:
        self.lag = 0.0

    def set_lag(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise EmulatorInputError("seconds", f"seconds must be a number >= 0, got {seconds!r}")
        self.lag = float(seconds)

    def reset(self) -> None:
        self.lag = 0.0

    def known(self, backend: Any, name: str | None, arn: str | None) -> bool:
        iam = iam_backends[backend.account_id][backend.partition]
        now = datetime.now(UTC)
        for profile in iam.instance_profiles.values():
            if (name and profile.name == name) or (arn and profile.arn == arn):
                made = profile.create_date
                made = made if made.tzinfo else made.replace(tzinfo=UTC)
                return (now - made).total_seconds() >= self.lag
        return False


VISIBILITY = ProfileVisibility()


def profile_refusal(backend: Any, profile: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """EC2's (code, message) for a launch naming ``profile`` ({"Name"} or {"Arn"}), or None
    when EC2 knows it (or the launch names none)."""
    name, arn = (profile.get("Name"), profile.get("Arn")) if profile else (None, None)
    if not (name or arn) or VISIBILITY.known(backend, name, arn):
        return None
    if arn:
        return CODE, (
            f"Value ({arn}) for parameter iamInstanceProfile.arn is invalid. "
            "Invalid IAM Instance Profile ARN"
        )
    return CODE, (
        f"Value ({name}) for parameter iamInstanceProfile.name is invalid. "
        "Invalid IAM Instance Profile name"
    )


def refuse_unknown_profile(
    backend: Any, params: Mapping[str, Any], template: Mapping[str, Any]
) -> None:
    """RunInstances: the request's own profile, else its launch template's, must be known."""
    refusal = profile_refusal(
        backend, params.get("IamInstanceProfile") or template.get("IamInstanceProfile")
    )
    if refusal is not None:
        raise EC2ClientError(*refusal)
