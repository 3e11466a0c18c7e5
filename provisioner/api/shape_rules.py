"""The rules of the reference controller's annotation table, one function per key.

`shape.parse_gang_shape` calls `read_shape_fields`, which applies every rule, collects
every refusal as a `Problem`, and returns the fields of a `GangShape` with the controller's
defaults filled in. Formats (what an AMI id looks like) are the model's field types from
`fields`, checked through pydantic; the rules here add what depends on the settings and
the Job: defaults, limits, allowlists, the cluster region, the pod count.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final, TypeVar

from pydantic import TypeAdapter, ValidationError

from provisioner.api import constants as c
from provisioner.api.block_duration import BlockDurationRefusal, block_duration
from provisioner.api.durations import DurationError, format_duration
from provisioner.api.fields import (
    AmiId,
    AmiVariant,
    AvailabilityZone,
    CapacityReservationId,
    GangCount,
    InstanceType,
    Mode,
    NonNegativeDuration,
    PoolName,
    PositiveDuration,
    RoleArn,
    SubnetId,
)
from provisioner.api.problems import GangShapeError, Problem, show_value
from provisioner.api.settings import Settings

__all__ = ["default_ami_variant", "read_shape_fields", "zone_in_region"]

T = TypeVar("T")

_POOL = TypeAdapter[str](PoolName)
_COUNT = TypeAdapter[int](GangCount)
_INSTANCE_TYPE = TypeAdapter[str](InstanceType)
_MODE = TypeAdapter[Mode](Mode)
_ZONE = TypeAdapter[str](AvailabilityZone)
_SUBNET = TypeAdapter[str](SubnetId)
_ROLE = TypeAdapter[str](RoleArn)
_KEEP_WARM = TypeAdapter[timedelta](NonNegativeDuration)
_LIFETIME = TypeAdapter[timedelta](PositiveDuration)
_VARIANT = TypeAdapter[AmiVariant](AmiVariant)
_AMI = TypeAdapter[str](AmiId)
_RESERVATION = TypeAdapter[str](CapacityReservationId)

_POOL_OK: Final = 'a lowercase RFC 1123 name of at most 63 characters, such as "pretrain-p4d"'
_MODE_OK: Final = '"runinstances" (one zone per attempt) or "fleet" (an instant fleet)'
_SUBNETS_OK: Final = 'a comma-separated list of subnet ids such as "subnet-0123456789abcdef0"'
_VARIANT_OK: Final = '"standard", "nvidia" or "neuron" (unset derives it from the type)'
_AMI_OK: Final = 'an AMI id such as "ami-0123456789abcdef0"'
_RESERVATION_OK: Final = 'a capacity reservation id such as "cr-0123456789abcdef0"'
_EFA_OK: Final = '"true" (one EFA interface per network card of the type) or "false"'
_PLACEMENT_OK: Final = '"cluster" (one cluster placement group for the gang) or "none"'
_EXAMPLE_ROLE: Final = "arn:aws:iam::123456789012:role/eks-gang-node-role"
_KNOWN: Final = ", ".join(key.removeprefix(c.PREFIX) for key in c.GANG_ANNOTATIONS)


def zone_in_region(zone: str, region: str) -> bool:
    """Availability-zone names are the region's name plus one letter (us-east-1a)."""
    return re.fullmatch(re.escape(region) + "[a-z]", zone) is not None


def default_ami_variant(instance_type: str) -> AmiVariant:
    """The EKS AL2023 image line a type needs: p*/g* nvidia, inf*/trn* neuron, else standard.

    The family is the part before the dot; its letters before the first digit decide.
    """
    family = instance_type.split(".", 1)[0]
    letters = re.match(r"[a-z]*", family)
    prefix = letters.group(0) if letters else ""
    if prefix.startswith(("inf", "trn")):
        return "neuron"
    if prefix.startswith(("p", "g")):
        return "nvidia"
    return "standard"


def _detail(exc: ValidationError, fallback: str) -> str:
    """Our own validators' words when they spoke; otherwise the rule's description."""
    cause = (exc.errors(include_url=False)[0].get("ctx") or {}).get("error")
    if isinstance(cause, DurationError):
        return f"not a Go duration ({cause.problem})"
    if isinstance(cause, ValueError):
        return str(cause)
    return fallback


class _Reader:
    """The inputs of one parse, and the problems found so far."""

    def __init__(
        self,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        pods: int,
        settings: Settings,
        kind: str = "Job",
    ) -> None:
        self.labels, self.annotations, self.pods, self.settings = (
            labels,
            annotations,
            pods,
            settings,
        )
        # The kind the user applied (Job, JobSet, MPIJob...), so a count message names it.
        self.kind = kind
        # An empty value means unset, as in the reference ("empty ⇒ on-demand").
        self.values = {k: v.strip() for k, v in annotations.items() if v.strip()}
        self.problems: list[Problem] = []

    def refuse(self, key: str, value: str | None, reason: str, detail: str, accepted: str) -> None:
        self.problems.append(
            Problem(
                key=key,
                value=value,
                reason=reason,
                detail=detail,
                accepted=accepted,
                is_label=key == c.POOL_LABEL and reason in _LABEL_REASONS,
            )
        )

    def missing(self, key: str, accepted: str, why: str = "it is required") -> None:
        if key in self.labels:
            why += "; it is set as a label, but the controller reads it from annotations"
        self.refuse(key, None, c.REASON_MISSING_ANNOTATION, why, accepted)

    def check(
        self, adapter: TypeAdapter[T], key: str, raw: str, accepted: str, fallback: str
    ) -> T | None:
        try:
            return adapter.validate_python(raw)
        except ValidationError as exc:
            self.refuse(key, raw, c.REASON_INVALID_ANNOTATION, _detail(exc, fallback), accepted)
            return None

    def listed(
        self,
        adapter: TypeAdapter[str],
        key: str,
        accepted: str,
        what: str,
        region: str | None = None,
    ) -> tuple[str, ...] | None:
        """A comma-separated list whose entries are each valid and listed once."""
        raw = self.values.get(key)
        if raw is None:
            return ()
        items = [item.strip() for item in raw.split(",")]
        bad = [i for i in items if i and (not _valid(adapter, i) or not _in(i, region))]
        twice = sorted({i for i in items if items.count(i) > 1})
        if "" in items:
            detail = "it has an empty entry"
        elif bad:
            shown = ", ".join(show_value(b) for b in bad)
            detail = f"{'entry' if len(bad) == 1 else 'entries'} {shown}: {what}"
        elif twice:
            detail = f"{', '.join(show_value(t) for t in twice)} listed more than once"
        else:
            return tuple(items)
        self.refuse(key, raw, c.REASON_INVALID_ANNOTATION, detail, accepted)
        return None


_LABEL_REASONS: Final = (c.REASON_MISSING_LABEL, c.REASON_INVALID_LABEL)


def _valid(adapter: TypeAdapter[Any], value: str) -> bool:
    try:
        adapter.validate_python(value)
    except ValidationError:
        return False
    return True


def _in(zone: str, region: str | None) -> bool:
    return region is None or zone_in_region(zone, region)


# --- one rule per key --------------------------------------------------------------------


def _pool(r: _Reader) -> str | None:
    raw = r.labels.get(c.POOL_LABEL, "").strip()
    if not raw:
        r.refuse(
            c.POOL_LABEL, None, c.REASON_MISSING_LABEL, "every gang Job names its pool", _POOL_OK
        )
    elif not _valid(_POOL, raw):
        r.refuse(
            c.POOL_LABEL,
            raw,
            c.REASON_INVALID_LABEL,
            "not a lowercase RFC 1123 label of at most 63 characters",
            _POOL_OK,
        )
    else:
        return raw
    return None


def _count(r: _Reader) -> int | None:
    limit, pods, kind = r.settings.limits.max_gang_size, r.pods, r.kind
    accepted = f"a whole number from 1 to {limit} equal to the {kind}'s pod count ({pods})"
    raw = r.values.get(c.ANN_COUNT)
    if raw is None:
        r.missing(c.ANN_COUNT, accepted)
        return None
    n = r.check(_COUNT, c.ANN_COUNT, raw, accepted, "must be at least 1")
    if n is None:
        return None
    if n > limit:
        r.refuse(
            c.ANN_COUNT,
            raw,
            c.REASON_EXCEEDS_LIMIT,
            f"the controller allows at most {limit} (limits.maxGangSize)",
            accepted,
        )
        return None
    if n != pods:
        # Kueue sizes quota and gang-admits by the pod count; N nodes for M pods would
        # strand nodes or pods.
        r.refuse(
            c.ANN_COUNT,
            raw,
            c.REASON_COUNT_MISMATCH,
            f"the {kind} runs {pods} pods, and the gang must be exactly its pods",
            f"{pods} (the {kind}'s pod count), or make the {kind} run {n} pods",
        )
        return None
    return n


def _instance_type(r: _Reader) -> str | None:
    allow = r.settings.allowed_instance_types
    accepted = (
        f"an instance type matching allowedInstanceTypes ({', '.join(allow)})"
        if allow
        else 'an EC2 instance type such as "p4d.24xlarge"'
    )
    raw = r.values.get(c.ANN_INSTANCE_TYPE)
    if raw is None:
        r.missing(c.ANN_INSTANCE_TYPE, accepted)
        return None
    if r.check(_INSTANCE_TYPE, c.ANN_INSTANCE_TYPE, raw, accepted, "not an instance type") is None:
        return None
    if not r.settings.instance_type_allowed(raw):
        r.refuse(
            c.ANN_INSTANCE_TYPE,
            raw,
            c.REASON_NOT_ALLOWED,
            "the controller's allowedInstanceTypes does not include it",
            accepted,
        )
        return None
    return raw


def _mode(r: _Reader) -> Mode:
    raw = r.values.get(c.ANN_MODE)
    if raw is None:
        return r.settings.defaults.mode
    fallback = r.settings.defaults.mode
    return r.check(_MODE, c.ANN_MODE, raw, _MODE_OK, "not an acquisition mode") or fallback


def _region(r: _Reader) -> str:
    region = r.settings.defaults.region
    raw = r.values.get(c.ANN_REGION)
    if raw is not None and raw != region:
        r.refuse(
            c.ANN_REGION,
            raw,
            c.REASON_INVALID_ANNOTATION,
            f"the cluster is in {region}, and gang nodes can launch only there",
            f'"{region}", or leave it unset',
        )
    return region


def _placement(r: _Reader, region: str) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    zones_ok = f'a comma-separated list of zones in {region}, such as "{region}a"'
    zones = r.listed(_ZONE, c.ANN_AVAILABILITY_ZONES, zones_ok, f"not a zone of {region}", region)
    subnets = r.listed(_SUBNET, c.ANN_SUBNETS, _SUBNETS_OK, "not a subnet id")
    if c.ANN_AVAILABILITY_ZONES in r.values and c.ANN_SUBNETS in r.values:
        r.refuse(
            c.ANN_SUBNETS,
            r.values[c.ANN_SUBNETS],
            c.REASON_CONFLICTING_ANNOTATIONS,
            f"{c.ANN_AVAILABILITY_ZONES} is set too, and the two are mutually exclusive",
            f"either {c.ANN_SUBNETS} (exact subnets) or {c.ANN_AVAILABILITY_ZONES}, not both",
        )
    return zones, subnets


def _node_role(r: _Reader) -> str | None:
    default = r.settings.defaults.node_role_arn
    allowed = [role for role in r.settings.allowed_node_roles if role]
    accepted = (
        f"one of the allowed node roles: {', '.join(allowed)}"
        if allowed
        else f'an IAM role ARN such as "{_EXAMPLE_ROLE}"'
    )
    raw = r.values.get(c.ANN_NODE_ROLE_ARN)
    if raw is None:
        if not default:
            r.missing(
                c.ANN_NODE_ROLE_ARN,
                accepted,
                "it is required because the controller has no defaults.nodeRoleArn",
            )
        return default or None
    if r.check(_ROLE, c.ANN_NODE_ROLE_ARN, raw, accepted, "not an IAM role ARN") is None:
        return None
    if raw not in allowed:
        # The controller's iam:PassRole is scoped to exactly these roles.
        r.refuse(
            c.ANN_NODE_ROLE_ARN,
            raw,
            c.REASON_NOT_ALLOWED,
            "the controller may pass only its allowed node roles to EC2",
            accepted,
        )
        return None
    return raw


def _keep_warm(r: _Reader) -> timedelta | None:
    limit = r.settings.limits.max_keep_warm_ttl
    return _bounded_duration(
        r,
        c.ANN_KEEP_WARM_TTL,
        _KEEP_WARM,
        r.settings.defaults.keep_warm_ttl,
        limit,
        f'a Go duration from 0s to {format_duration(limit)}, such as "15m"',
        "limits.maxKeepWarmTTL",
    )


def _max_lifetime(r: _Reader) -> timedelta | None:
    # The reaper's backstop for a set nobody releases: a Job may not opt out of it.
    limit = r.settings.limits.max_lifetime
    return _bounded_duration(
        r,
        c.ANN_MAX_LIFETIME,
        _LIFETIME,
        r.settings.defaults.max_lifetime,
        limit,
        f'a positive Go duration up to {format_duration(limit)}, such as "6h"',
        "limits.maxLifetime; the installer may raise it",
    )


def _bounded_duration(
    r: _Reader,
    key: str,
    adapter: TypeAdapter[timedelta],
    default: timedelta,
    limit: timedelta,
    accepted: str,
    setting: str,
) -> timedelta | None:
    """The duration annotation `key` (its default when absent), refused above `limit`
    naming the installer's `setting`."""
    raw = r.values.get(key)
    if raw is None:
        return default
    value = r.check(adapter, key, raw, accepted, "not a Go duration")
    if value is not None and value > limit:
        r.refuse(
            key,
            raw,
            c.REASON_EXCEEDS_LIMIT,
            f"the controller allows at most {format_duration(limit)} ({setting})",
            accepted,
        )
        return None
    return value


def _optional(r: _Reader, adapter: TypeAdapter[T], key: str, accepted: str, what: str) -> T | None:
    raw = r.values.get(key)
    return None if raw is None else r.check(adapter, key, raw, accepted, what)


def _unknown_keys(r: _Reader) -> None:
    known = set(c.GANG_ANNOTATIONS)
    for key in sorted(k for k in r.annotations if k.startswith(c.PREFIX) and k not in known):
        if key == c.POOL_LABEL:
            detail = "the pool is read from the Job's labels, not its annotations"
            accepted = f"a label {c.POOL_LABEL} instead"
        else:
            guess = difflib.get_close_matches(key, c.GANG_ANNOTATIONS, n=1)
            hint = f" (did you mean {guess[0]}?)" if guess else ""
            detail = f"the controller knows no such key{hint}, and ignoring it could hide a typo"
            accepted = f"one of {_KNOWN} under {c.PREFIX}, or remove it"
        r.refuse(key, r.annotations[key], c.REASON_UNKNOWN_ANNOTATION, detail, accepted)


def _efa(r: _Reader) -> bool:
    raw = r.values.get(c.ANN_EFA)
    if raw is None:
        return False
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    r.refuse(c.ANN_EFA, raw, c.REASON_INVALID_ANNOTATION, "not a boolean", _EFA_OK)
    return False


def _placement_group(r: _Reader) -> str:
    raw = r.values.get(c.ANN_PLACEMENT_GROUP)
    if raw is None:
        return c.PLACEMENT_NONE
    if raw in c.PLACEMENT_STRATEGIES:
        return raw
    detail = (
        "only the cluster strategy is offered (a gang wants its nodes close, not spread)"
        if raw in ("spread", "partition")
        else "not a placement strategy"
    )
    r.refuse(c.ANN_PLACEMENT_GROUP, raw, c.REASON_INVALID_ANNOTATION, detail, _PLACEMENT_OK)
    return c.PLACEMENT_NONE


def _block_duration(r: _Reader, reservation: str | None) -> timedelta | None:
    raw = r.values.get(c.ANN_CAPACITY_BLOCK_DURATION)
    limit = r.settings.purchase_policy(r.values.get(c.ANN_INSTANCE_TYPE, "")).max_duration
    answer = block_duration(raw, limit, reservation)
    if not isinstance(answer, BlockDurationRefusal):
        return answer  # None when the Job asks for no block
    assert raw is not None
    r.refuse(c.ANN_CAPACITY_BLOCK_DURATION, raw, answer.reason, answer.detail, answer.accepted)
    return None


def read_shape_fields(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    total_pod_count: int,
    settings: Settings,
    kind: str = "Job",
) -> dict[str, Any]:
    """Apply every rule; return GangShape's fields, or raise `GangShapeError` with all
    problems in annotation-table order (unknown keys last). `kind` is the applied object's
    kind, named in the count's messages."""
    r = _Reader(labels, annotations, total_pod_count, settings, kind)
    pool, count, instance_type = _pool(r), _count(r), _instance_type(r)
    mode, region = _mode(r), _region(r)
    zones, subnets = _placement(r, region)
    role, keep_warm = _node_role(r), _keep_warm(r)
    max_lifetime = _max_lifetime(r)
    variant = (
        _optional(r, _VARIANT, c.ANN_AMI_VARIANT, _VARIANT_OK, "not an EKS AL2023 image line")
        if c.ANN_AMI_VARIANT in r.values
        else default_ami_variant(instance_type or "")
    )
    ami_id = _optional(r, _AMI, c.ANN_AMI_ID, _AMI_OK, "not an AMI id")
    reservation = _optional(
        r,
        _RESERVATION,
        c.ANN_CAPACITY_RESERVATION_ID,
        _RESERVATION_OK,
        "not a capacity reservation id",
    )
    efa, placement_group = _efa(r), _placement_group(r)
    block_duration = _block_duration(r, reservation)
    _unknown_keys(r)
    if r.problems:
        raise GangShapeError(r.problems)
    return {
        "pool": pool,
        "count": count,
        "instance_type": instance_type,
        "mode": mode,
        "region": region,
        "availability_zones": zones,
        "subnets": subnets,
        "node_role_arn": role,
        "keep_warm_ttl": keep_warm,
        "max_lifetime": max_lifetime,
        "ami_variant": variant,
        "ami_id": ami_id,
        "capacity_reservation_id": reservation,
        "efa": efa,
        "placement_group": placement_group,
        "capacity_block_duration": block_duration,
    }
