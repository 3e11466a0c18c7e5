"""The account's organization: service control policies (SCPs) that bound every caller.

"Service control policies (SCPs)" (AWS Organizations User Guide): an SCP limits what every
principal of a member account may do, its root user included; it grants nothing, and an
explicit deny in it wins over any identity policy's allow. The emulated account is a member
account under `FullAWSAccess` (the SCP AWS attaches by default), so only the denies added
here bite.

The one switch is the policy "Example SCPs for tagging resources" gives as "Require a tag
on specified created resources": deny `ec2:RunInstances` (and here `ec2:CreateFleet`, the
other call that creates instances) on `instance/*` and `volume/*` when the request lacks the
tag (`"Null": {"aws:RequestTag/<key>": "true"}`). `authorization.authorize` evaluates these
documents on the same request contexts as the caller's own policies, and refuses with EC2's
UnauthorizedOperation worded as "Troubleshoot access denied error messages" (IAM User
Guide) words an SCP's deny: "with an explicit deny in a service control policy".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from devenv.emulator.model import EmulatorInputError

FULL_AWS_ACCESS: Final[dict[str, Any]] = {
    "Version": "2012-10-17",
    "Statement": [{"Sid": "FullAWSAccess", "Effect": "Allow", "Action": "*", "Resource": "*"}],
}
# The calls that create instances, and what the example SCP requires tags on.
TAG_REQUIRED_ACTIONS: Final = ("ec2:RunInstances", "ec2:CreateFleet")
TAG_REQUIRED_RESOURCES: Final = ("arn:aws:ec2:*:*:instance/*", "arn:aws:ec2:*:*:volume/*")
_KEY_MAX: Final = 128


def require_tags_policy(keys: Sequence[str]) -> dict[str, Any]:
    """The SCP that denies creating instances (and their volumes) without each tag in `keys`."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": f"DenyLaunchWithNo{''.join(ch for ch in key if ch.isalnum())}Tag",
                "Effect": "Deny",
                "Action": list(TAG_REQUIRED_ACTIONS),
                "Resource": list(TAG_REQUIRED_RESOURCES),
                "Condition": {"Null": {f"aws:RequestTag/{key}": "true"}},
            }
            for key in keys
        ],
    }


def checked_keys(keys: Any) -> list[str]:
    """The tag keys a control-API request names, or an input error naming the field."""
    if not isinstance(keys, list) or not all(
        isinstance(k, str) and 0 < len(k) <= _KEY_MAX for k in keys
    ):
        raise EmulatorInputError("tags", "tags must be a list of tag keys (1-128 characters)")
    return list(dict.fromkeys(keys))


class OrganizationPolicies:
    """The SCPs in force beside `FULL_AWS_ACCESS`; empty: the account is unrestricted.
    Part of `EmulatorState`, cleared with it."""

    service_control_policies: list[dict[str, Any]]

    def _clear_organization_state(self) -> None:
        self.service_control_policies = []

    def require_launch_tags(self, keys: Sequence[str]) -> None:
        """From now on, launches whose instances lack any of `keys` are denied; [] lifts it."""
        self.service_control_policies = [require_tags_policy(keys)] if keys else []

    def organization_documents(self) -> list[dict[str, Any]] | None:
        """The SCPs to evaluate a call under, or None when none restricts the account."""
        if not self.service_control_policies:
            return None
        return [FULL_AWS_ACCESS, *self.service_control_policies]
