"""The EC2 tags of a gang (DESIGN §3), written at launch and read back by the reaper.

Called by the launchers (``launch_tags`` / ``tag_specifications``), by
``Ec2Engine.set_keep_warm_tag``, and by the instance views (``parse_tags``) the reaper and
the GangNodePool reconciler read.

Tag values are what the reference controller writes, so a reaper of either can read the
other's instances: ``max-lifetime`` is a Go duration (``4h0m0s``) and ``keep-warm-until`` an
RFC 3339 UTC time, empty while no keep-warm window is open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from botocore.exceptions import ClientError

from provisioner.api import constants as c
from provisioner.api.durations import DurationError, format_duration, parse_duration
from provisioner.cloud.errors import CloudError, ErrorKind, error_code
from provisioner.cloud.types import LaunchSpec, ManagedTags

# RunInstances tags what it creates in one step; the ENIs and volumes carry the pool too,
# so a leak of either is traceable to its gang.
RUNINSTANCES_RESOURCE_TYPES: Final = ("instance", "volume", "network-interface")
# An instant fleet accepts tags for the fleet and its instances only; volume and ENI tags
# come from the launch template.
FLEET_RESOURCE_TYPES: Final = ("instance", "fleet")

_OURS: Final = frozenset(
    {
        c.TAG_MANAGED,
        c.TAG_CLUSTER,
        c.TAG_POOL,
        c.TAG_GROUP,
        c.TAG_MAX_LIFETIME,
        c.TAG_KEEP_WARM_UNTIL,
    }
)


def launch_tags(spec: LaunchSpec) -> dict[str, str]:
    """Every tag a gang instance is born with; extra tags never override ours."""
    clash = (_OURS | {c.cluster_ownership_tag(spec.cluster_name)}) & set(spec.extra_tags)
    if clash:
        raise ValueError(f"extra tags may not set the controller's own keys: {sorted(clash)}")
    tags = dict(spec.extra_tags)
    tags.update(
        {
            c.TAG_MANAGED: "true",
            c.TAG_CLUSTER: spec.cluster_name,
            c.TAG_POOL: spec.pool_name,
            c.TAG_GROUP: spec.group,
            c.TAG_MAX_LIFETIME: format_go_duration(spec.max_lifetime),
            c.TAG_KEEP_WARM_UNTIL: "",
            c.cluster_ownership_tag(spec.cluster_name): "owned",
        }
    )
    return tags


# "Troubleshoot access denied error messages" (IAM User Guide): a deny by a service control
# policy says "with an explicit deny in a service control policy"; EC2 answers it with
# UnauthorizedOperation ("Error codes for the Amazon EC2 API").
_SCP_PHRASE: Final = "service control policy"
_DENIED_CODES: Final = frozenset({"UnauthorizedOperation", "AccessDenied"})
REASON_ORGANIZATION_POLICY: Final = "DeniedByOrganizationPolicy"


def organization_denial(exc: BaseException, action: str, spec: LaunchSpec) -> CloudError | None:
    """The refusal of a launch by the account's organization (an SCP), said as such, or None
    for any other error.

    The controller's own IAM policy allows the launch, so "attach the controller policy"
    would send the installer the wrong way; an SCP that denies untagged launches is the
    common cause (AWS's "Example SCPs for tagging resources", Require a tag on specified
    created resources). EC2 does not say which tag the policy wanted (the encoded message
    holds the request, not the policy), so the message lists what the launch carried and
    names the setting that adds tags.
    """
    if error_code(exc) not in _DENIED_CODES:
        return None
    said = (
        str(exc.response.get("Error", {}).get("Message", ""))
        if isinstance(exc, ClientError)
        else str(exc)
    )
    if _SCP_PHRASE not in said.lower():
        return None
    extra = sorted(spec.extra_tags)
    carried = ", ".join(extra) if extra else "none"
    return CloudError(
        ErrorKind.CONFIG,
        error_code(exc),
        REASON_ORGANIZATION_POLICY,
        f"{action} was refused by a service control policy of this account's AWS "
        "organization (an explicit deny in a service control policy), not by the "
        "controller's IAM policy. Organizations commonly deny launches without their "
        f"cost-allocation tags; the installer's tags on this launch: {carried}. Ask the "
        "organization's administrators which tags their policy requires and set them in "
        "instances.extraTags (the chart's `tags`); nothing was launched. "
        f"EC2 said: {said}",
    )


def tag_specifications(
    tags: Mapping[str, str], resource_types: Iterable[str]
) -> list[dict[str, Any]]:
    pairs = [{"Key": k, "Value": v} for k, v in tags.items()]
    return [{"ResourceType": rt, "Tags": list(pairs)} for rt in resource_types]


def keep_warm_value(until: datetime | None) -> str:
    """The tag value for a keep-warm deadline; empty clears it (DeleteTags is not granted)."""
    return "" if until is None else format_rfc3339(until)


def format_rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("keep-warm deadlines must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def format_go_duration(duration: timedelta) -> str:
    """Go's ``time.Duration.String()``: 4h0m0s, 15m0s, 45s, 0s (tags never hold negatives)."""
    if duration < timedelta(0):
        raise ValueError("durations in tags are never negative")
    return format_duration(duration)


def parse_go_duration(text: str) -> timedelta | None:
    """A Go duration string (``4h``, ``1h30m``, ``90s``, ``0``) or None if it is not one.

    Tags can be edited by anyone with CreateTags, so a bad value reads as "unknown" rather
    than failing the reaper's sweep.
    """
    try:
        parsed = parse_duration(text)
    except DurationError:
        return None
    return parsed if parsed >= timedelta(0) else None


def tags_to_dict(tags: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    """EC2's ``[{"Key": k, "Value": v}]`` as a plain dict."""
    return {str(t["Key"]): str(t.get("Value", "")) for t in tags or ()}


def parse_tags(tags: Mapping[str, str]) -> ManagedTags:
    return ManagedTags(
        managed=tags.get(c.TAG_MANAGED) == "true",
        cluster=tags.get(c.TAG_CLUSTER) or None,
        pool=tags.get(c.TAG_POOL) or None,
        group=tags.get(c.TAG_GROUP) or None,
        max_lifetime=parse_go_duration(tags.get(c.TAG_MAX_LIFETIME, "")),
        keep_warm_until=parse_rfc3339(tags.get(c.TAG_KEEP_WARM_UNTIL, "")),
    )
