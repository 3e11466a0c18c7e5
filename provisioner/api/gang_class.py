"""The GangClass custom resource, and how a gang's shape is read through one.

A GangClass (cluster-scoped, written once by a platform team) holds the shape defaults of
every gang on the queues whose AdmissionCheck names it in `spec.parameters`, as Kueue's
ProvisioningRequestConfig sits behind its check, and says which annotations a Job may set
over them (`spec.jobOverrides`; `count` always, still checked against the pods). The
controller never writes one: the AdmissionCheck reconciler reads it for the check's Active
condition (`class_problems`); the Workload reconciler and the webhook read a gang's shape
through it (`read_gang_shape`).

The rule is one overlay. The class becomes annotations (`class_annotations`), the Job's
allowed annotations go over them, and `parse_gang_shape` judges the result: every rule and
message of the annotation table holds, and a refusal of a value the class gave names the
class's field. A Job's annotation the class does not allow is refused naming the class and
the fix. Without the pool label the pool is derived (`derived_pool_name`): one per
namespace, class and shape; without a count annotation the count is the pods Kueue counts.
`FieldSource` records who decided each field, for the pool's spec and `explain`.

Buying Capacity Blocks: `capacityBlockDuration` is the class's default duration (the
annotation's field, judged by its rules), and `blockPurchase`, when set, replaces the
settings' purchase policy for the class's gangs (`api.class_purchase`): the duration a Job
may ask for is the class's `maxDuration`, and the pool buys under the class's cap. Buying
still needs the installation's grant (the chart's `blockPurchase.enabled`); a class that
enables it without that grant is refused on its AdmissionCheck, naming the fix.
The CRD's schema is written by hand in `crds/gangclass.yaml`; a unit test keeps it in step.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from typing import Annotated, Any, Final, cast

import yaml
from pydantic import AfterValidator, Field, WithJsonSchema

from provisioner.api import constants as c
from provisioner.api.class_purchase import ClassBlockPurchase, purchase_problem, with_policy
from provisioner.api.fields import AmiVariant, Mode, PlacementStrategy
from provisioner.api.meta import KubeModel, ObjectMeta, kube_alias
from provisioner.api.problems import GangShapeError, Problem
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShape, parse_gang_shape, shape_identity
from provisioner.api.workload import AdmissionCheckParameters

__all__ = [
    "CLASS_PRINTER_COLUMNS",
    "CheckClass",
    "ClassedShape",
    "FieldSource",
    "GangClass",
    "GangClassSpec",
    "check_class",
    "class_annotations",
    "class_problems",
    "derived_pool_name",
    "load_class_crd",
    "read_gang_shape",
]

# Annotation names without the prefix, in the annotation table's order.
OVERRIDABLE: Final = tuple(key.removeprefix(c.PREFIX) for key in c.GANG_ANNOTATIONS)


def _overridable(name: str) -> str:
    if name not in OVERRIDABLE:
        raise ValueError(f"{name!r} is not a gang annotation; use one of {', '.join(OVERRIDABLE)}")
    return name


JobOverride = Annotated[
    str, AfterValidator(_overridable), WithJsonSchema({"type": "string", "enum": list(OVERRIDABLE)})
]


class GangClassSpec(KubeModel):
    """A queue's gang shape defaults, spelled as the Job annotations are; unset fields fall
    to the controller's defaults (or must come from the Job, where it may set them)."""

    instance_type: str | None = None
    mode: Mode | None = None
    region: str | None = None
    availability_zones: tuple[str, ...] = ()
    subnets: tuple[str, ...] = ()
    capacity_reservation_id: str | None = None
    efa: bool | None = None
    placement_group: PlacementStrategy | None = None
    keep_warm_ttl: str | None = None
    max_lifetime: str | None = None
    ami_variant: AmiVariant | None = None
    node_role_arn: str | None = None
    # The duration of the Capacity Block bought for a gang whose Job names none.
    capacity_block_duration: str | None = None
    # The purchase policy of this class's gangs, in place of the settings' (None: theirs).
    block_purchase: ClassBlockPurchase | None = None
    # Annotation names (without the prefix) a Job may set over the class.
    job_overrides: tuple[JobOverride, ...] = Field(default=())


class GangClass(KubeModel):
    api_version: str = c.API_VERSION
    kind: str = c.GANG_CLASS_KIND
    metadata: ObjectMeta
    spec: GangClassSpec = GangClassSpec()

    @property
    def name(self) -> str:
        return self.metadata.name

    def allows(self, key: str) -> bool:
        """May a Job set annotation `key` (with the prefix) over this class?"""
        name = key.removeprefix(c.PREFIX)
        return key == c.ANN_COUNT or name in self.spec.job_overrides


# The class's fields, by the annotation each stands for.
_FIELD_OF: Final = {
    c.ANN_INSTANCE_TYPE: "instance_type",
    c.ANN_MODE: "mode",
    c.ANN_REGION: "region",
    c.ANN_AVAILABILITY_ZONES: "availability_zones",
    c.ANN_SUBNETS: "subnets",
    c.ANN_CAPACITY_RESERVATION_ID: "capacity_reservation_id",
    c.ANN_EFA: "efa",
    c.ANN_PLACEMENT_GROUP: "placement_group",
    c.ANN_KEEP_WARM_TTL: "keep_warm_ttl",
    c.ANN_MAX_LIFETIME: "max_lifetime",
    c.ANN_AMI_VARIANT: "ami_variant",
    c.ANN_NODE_ROLE_ARN: "node_role_arn",
    c.ANN_CAPACITY_BLOCK_DURATION: "capacity_block_duration",
}

CLASS_PRINTER_COLUMNS: Final = (
    {"name": "TYPE", "type": "string", "jsonPath": ".spec.instanceType"},
    {"name": "MODE", "type": "string", "jsonPath": ".spec.mode"},
    {"name": "OVERRIDES", "type": "string", "jsonPath": ".spec.jobOverrides"},
    {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)
"""`kubectl get gangclasses` columns, as in the CRD's additionalPrinterColumns."""


class FieldSource(StrEnum):
    """Who decided a field of a gang's shape (`GangNodePoolSpec.fieldSources`)."""

    CLASS = "class"  # the GangClass behind the queue's check
    ANNOTATION = "annotation"  # the Job's own annotation (or, for the pool, its label)
    DEFAULT = "default"  # the controller's settings, or unset
    PODS = "pods"  # the count: the pods Kueue counts for the Workload
    DERIVED = "derived"  # the pool: derived from namespace, class and shape


@dataclass(frozen=True)
class ClassedShape:
    """A gang's shape, the class it was read through (None: none), who decided each
    field, by annotation name without the prefix (and "pool"), and the class's purchase
    policy (None: the settings' decide)."""

    shape: GangShape
    gang_class: str | None
    sources: dict[str, FieldSource]
    purchase_policy: ClassBlockPurchase | None = None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def class_annotations(gang_class: GangClass) -> dict[str, str]:
    """The class as the annotations a Job would carry to say the same."""
    spec = gang_class.spec
    values = {key: getattr(spec, field) for key, field in _FIELD_OF.items()}
    return {key: _text(v) for key, v in values.items() if v is not None and v != ()}


def _origin(gang_class: GangClass, key: str) -> str:
    return f"GangClass {gang_class.name} (spec.{kube_alias(_FIELD_OF[key])})"


def _forbidden(gang_class: GangClass, key: str, value: str) -> Problem:
    short = key.removeprefix(c.PREFIX)
    return Problem(
        key=key,
        value=value,
        reason=c.REASON_NOT_ALLOWED,
        detail=(
            f"GangClass {gang_class.name}, behind this Job's queue, decides {short}, and its "
            "spec.jobOverrides does not let a Job set it"
        ),
        accepted=(
            f"no {key} annotation (the class decides it), or ask the platform team to add "
            f'"{short}" to GangClass {gang_class.name}\'s spec.jobOverrides'
        ),
    )


def derived_pool_name(namespace: str, class_name: str, shape: GangShape) -> str:
    """The pool of a Job without a pool label: `<namespace>-<class>-<type>-<hash>`, where the
    hash (8 hex of SHA-256) covers the namespace, the class and every field a claimant must
    share with the pool, so one shape in one namespace is one warm pool, whatever the Job's
    name. A valid label value and object name (at most 63 characters)."""
    identity = json.dumps([namespace, class_name, shape_identity(shape)])
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    readable = re.sub(r"[^a-z0-9-]", "-", f"{namespace}-{class_name}-{shape.instance_type}")
    readable = re.sub(r"-+", "-", readable)[: 63 - 1 - len(digest)].strip("-")
    return f"{readable}-{digest}" if readable else digest


def _sources(
    class_keys: set[str], job_keys: set[str], *, pool: FieldSource, count: FieldSource
) -> dict[str, FieldSource]:
    out = {"pool": pool}
    for key in c.GANG_ANNOTATIONS:
        name = key.removeprefix(c.PREFIX)
        if key == c.ANN_COUNT:
            out[name] = count
        elif key in job_keys:
            out[name] = FieldSource.ANNOTATION
        else:
            out[name] = FieldSource.CLASS if key in class_keys else FieldSource.DEFAULT
    return out


# A stand-in pool label while the shape that names the derived pool is read.
_PENDING_POOL: Final = "derived"


def read_gang_shape(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    total_pod_count: int,
    settings: Settings,
    *,
    kind: str = "Job",
    gang_class: GangClass | None = None,
    namespace: str = "",
) -> ClassedShape:
    """The gang's shape, read through `gang_class` when the queue's check names one, else
    from the Job alone as the reference reads it; raises `GangShapeError` naming every
    problem, a class's field where the class gave the value."""
    ours = {k: v for k, v in annotations.items() if k.startswith(c.PREFIX) and v.strip()}
    if gang_class is None:
        shape = parse_gang_shape(labels, annotations, total_pod_count, settings, kind)
        sources = _sources(set(), set(ours), pool=FieldSource.ANNOTATION, count=_ann(ours))
        return ClassedShape(shape, None, sources)

    settings = with_policy(settings, gang_class.spec.block_purchase)
    base = class_annotations(gang_class)
    known = [k for k in ours if k in c.GANG_ANNOTATIONS]
    forbidden = [_forbidden(gang_class, k, ours[k]) for k in known if not gang_class.allows(k)]
    allowed = {k: v for k, v in ours.items() if k not in c.GANG_ANNOTATIONS or gang_class.allows(k)}
    if c.ANN_AVAILABILITY_ZONES in allowed or c.ANN_SUBNETS in allowed:
        # A Job's zones or subnets replace the class's placement, whichever it names.
        base.pop(c.ANN_AVAILABILITY_ZONES, None)
        base.pop(c.ANN_SUBNETS, None)
    merged = {**base, **allowed}
    count_source = _ann(allowed)
    if c.ANN_COUNT not in merged:
        merged[c.ANN_COUNT] = str(total_pod_count)
        count_source = FieldSource.PODS
    pool_label = labels.get(c.POOL_LABEL, "").strip()
    read_labels = dict(labels) if pool_label else {**labels, c.POOL_LABEL: _PENDING_POOL}
    from_class = {k for k in base if k not in allowed}
    try:
        shape = parse_gang_shape(read_labels, merged, total_pod_count, settings, kind)
    except GangShapeError as err:
        named = [
            p.model_copy(update={"origin": _origin(gang_class, p.key)})
            if p.key in from_class
            else p
            for p in err.problems
        ]
        raise GangShapeError([*forbidden, *named]) from err
    if forbidden:
        raise GangShapeError(forbidden)
    pool_source = FieldSource.ANNOTATION
    if not pool_label:
        name = derived_pool_name(namespace, gang_class.name, shape)
        shape = shape.model_copy(update={"pool": name})
        pool_source = FieldSource.DERIVED
    sources = _sources(from_class, set(allowed), pool=pool_source, count=count_source)
    return ClassedShape(shape, gang_class.name, sources, gang_class.spec.block_purchase)


def _ann(annotations: Mapping[str, str]) -> FieldSource:
    return FieldSource.ANNOTATION if c.ANN_COUNT in annotations else FieldSource.DEFAULT


def class_problems(gang_class: GangClass, settings: Settings) -> list[str]:
    """Why no Job could run through this class as written (empty: it is usable): a value
    the annotation rules refuse, or a field the rules require that the class leaves unset
    and does not let a Job set, or buying the class enables and the installation does not
    grant."""
    pods = 1
    base = {**class_annotations(gang_class), c.ANN_COUNT: str(pods)}
    own = gang_class.spec.block_purchase
    out = [p for p in [purchase_problem(gang_class.name, own, settings)] if p]
    try:
        parse_gang_shape({c.POOL_LABEL: _PENDING_POOL}, base, pods, with_policy(settings, own))
    except GangShapeError as err:
        for p in err.problems:
            if p.value is None:
                if gang_class.allows(p.key):
                    continue  # each Job names it
                short = p.key.removeprefix(c.PREFIX)
                out.append(
                    f"{short} is not set and spec.jobOverrides does not let a Job set it "
                    f"({p.detail}); set it in the class, or add {short!r} to spec.jobOverrides."
                )
            else:
                p = p.model_copy(update={"origin": _origin(gang_class, p.key)})
                out.append(p.message)
    return out


@dataclass(frozen=True)
class CheckClass:
    """What an AdmissionCheck of ours makes of its `spec.parameters`: the class gangs on its
    queues are read through (None: it names none, the reference's Job-only reading), or,
    when it names one no gang can use, the Active condition's reason and message."""

    gang_class: GangClass | None = None
    reason: str | None = None
    message: str | None = None

    @property
    def usable(self) -> bool:
        return self.reason is None


def check_class(
    check_name: str,
    parameters: AdmissionCheckParameters | None,
    classes: Callable[[str], GangClass | None],
    settings: Settings,
) -> CheckClass:
    """The class AdmissionCheck `check_name`'s parameters name, read through `classes`."""
    if parameters is None:
        return CheckClass()
    if (parameters.api_group, parameters.kind) != (c.GROUP, c.GANG_CLASS_KIND):
        return CheckClass(
            reason=c.AC_REASON_BAD_PARAMETERS,
            message=(
                f"AdmissionCheck {check_name} names {parameters.kind} {parameters.name} "
                f"({parameters.api_group or 'core'}) in spec.parameters; this controller reads "
                f"only a {c.GANG_CLASS_KIND} (apiGroup {c.GROUP}). Name one, or remove "
                "spec.parameters."
            ),
        )
    found = classes(parameters.name)
    if found is None:
        return CheckClass(
            reason=c.AC_REASON_CLASS_NOT_FOUND,
            message=(
                f"GangClass {parameters.name}, named by AdmissionCheck {check_name}'s "
                "spec.parameters, does not exist. Create it (kubectl get gangclasses lists "
                "those there are), or name another."
            ),
        )
    problems = class_problems(found, settings)
    if problems:
        return CheckClass(
            reason=c.AC_REASON_CLASS_INVALID,
            message=f"GangClass {found.name} cannot serve a gang: {' '.join(problems)}",
        )
    return CheckClass(gang_class=found)


def load_class_crd() -> dict[str, Any]:
    """The GangClass CustomResourceDefinition, ready to create."""
    text = resources.files("provisioner.api").joinpath("crds/gangclass.yaml").read_text()
    return cast(dict[str, Any], yaml.safe_load(text))
