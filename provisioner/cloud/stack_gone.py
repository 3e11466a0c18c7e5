"""Which resource of the pool's stack an EC2 launch refusal says is missing.

Called by ``provisioner.cloud.errors`` (every ``CloudError`` carries the answer as
``gone``) and by ``provisioner.cloud.fleet`` (a fleet's ``Errors`` entries). The pool's
state machine reads ``CloudError.gone``, a type, and never the message this module reads.

Most of these answers have a code of their own (``InvalidLaunchTemplateId.NotFound``,
``InvalidPlacementGroup.Unknown``). The instance profile has none: EC2 answers a launch
whose profile it does not know with ``InvalidParameterValue`` and the message "Value (<name>)
for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name" (by
name; "... iamInstanceProfile.arn is invalid. Invalid IAM Instance Profile ARN" by ARN, as
the pool's launch template names it). Karpenter's AWS provider recognizes it the same way
(``pkg/errors``: ``IsInstanceProfileNotFound``, the code and that phrase), and so does this
module, once, at the edge; the same code with any other message stays a request error.

The same answer comes right after the profile is made: IAM is eventually consistent, and
EC2 may not see a new profile for a while ("Changes that I make are not always immediately
visible", IAM User Guide, Troubleshooting IAM). Which of the two it is, the pool decides
from what its stack did last (``controllers.pool.drift_outcome``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from provisioner.cloud.error_codes import STACK_RESOURCE_GONE_CODES

__all__ = [
    "INSTANCE_PROFILE_FIX",
    "INSTANCE_PROFILE_REASON",
    "StackResource",
    "gone_resource",
    "is_instance_profile_unknown",
]


class StackResource(StrEnum):
    """A resource of the pool's stack that a launch names (``stacks.pool_program``)."""

    LAUNCH_TEMPLATE = "launch-template"
    PLACEMENT_GROUP = "placement-group"
    INSTANCE_PROFILE = "instance-profile"


_PROFILE_CODE: Final = "InvalidParameterValue"
# EC2's two wordings: the profile named by name, and by ARN.
_PROFILE_PHRASES: Final = (
    "Invalid IAM Instance Profile name",
    "Invalid IAM Instance Profile ARN",
)
INSTANCE_PROFILE_REASON: Final = "InstanceProfileNotFound"
INSTANCE_PROFILE_FIX: Final = (
    "EC2 does not know the pool's node instance profile: it was deleted outside the pool's "
    "stack, or it was made so recently that EC2 does not see it yet (IAM is eventually "
    "consistent). The pool refreshes its stack, which makes the profile again when the "
    "controller manages it (iam.selfManageInstanceProfile) and says it is missing when it "
    "does not, and waits for EC2 to see a profile IAM already has."
)


def is_instance_profile_unknown(code: str | None, message: str) -> bool:
    """Whether EC2's answer (code and message) says it does not know the instance profile."""
    return code == _PROFILE_CODE and any(phrase in message for phrase in _PROFILE_PHRASES)


def gone_resource(code: str | None, message: str = "") -> StackResource | None:
    """The stack resource EC2's answer says is missing, or None for any other answer."""
    if is_instance_profile_unknown(code, message):
        return StackResource.INSTANCE_PROFILE
    if code in STACK_RESOURCE_GONE_CODES:
        if code.startswith("InvalidPlacementGroup."):
            return StackResource.PLACEMENT_GROUP
        return StackResource.LAUNCH_TEMPLATE
    return None
