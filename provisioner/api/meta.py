"""Shared pieces of Kubernetes object models: the base class, times, metadata, conditions.

`gangnodepool` and `workload` build their views on these; `provisioner/kube` turns API
bodies into them with `model_validate` and back with `to_dict`. Everything is frozen: a
reconciler makes a changed copy with `model_copy(update=...)` and the status writer
compares the two, which keeps "did anything change?" a plain equality.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal, Protocol, Self

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    model_serializer,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "Condition",
    "ConditionStatus",
    "KubeModel",
    "KubeObject",
    "KubeTime",
    "ObjectMeta",
    "OmitEmptyModel",
    "OwnerReference",
    "condition_is_true",
    "find_condition",
    "format_kube_time",
    "set_condition",
    "to_utc_seconds",
]

# Where Go's JSON name is not what to_camel would produce.
_ALIAS_EXCEPTIONS: Final = {"keep_warm_ttl": "keepWarmTTL", "uid": "uid"}


def kube_alias(name: str) -> str:
    """The Kubernetes JSON name of a field: camelCase, with Go's spelling of acronyms."""
    return _ALIAS_EXCEPTIONS.get(name) or to_camel(name)


class KubeModel(BaseModel):
    """Base of every Kubernetes-shaped model: camelCase on the wire, snake_case in Python.

    Unknown fields are ignored, so a newer API server or Kueue adding a field does not
    break parsing; our own CRD's schema prunes unknown fields anyway.
    """

    model_config = ConfigDict(
        alias_generator=kube_alias,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        frozen=True,
        extra="ignore",
    )

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> Self:
        """Read a Kubernetes JSON body (as the client returns it)."""
        return cls.model_validate(body)

    def to_dict(self) -> dict[str, Any]:
        """The Kubernetes JSON body: camelCase keys, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def fields_read(self) -> dict[str, Any]:
        """The body as it was read, as far as the model knows it: only the fields the body
        held, defaults left out. A write helper diffs what it wants against this, so a
        default the stored object lacks is written, as a diff of the raw body would."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)


def to_utc_seconds(value: datetime) -> datetime:
    """`value` as metav1.Time holds it: UTC, whole seconds."""
    # metav1.Time has whole-second precision; holding the same value here means a round
    # trip through the API server compares equal and does not look like a change.
    return value.astimezone(UTC).replace(microsecond=0)


def format_kube_time(value: datetime) -> str:
    """RFC 3339 in UTC with whole seconds, as metav1.Time writes it."""
    return to_utc_seconds(value).strftime("%Y-%m-%dT%H:%M:%SZ")


KubeTime = Annotated[
    AwareDatetime,
    AfterValidator(to_utc_seconds),
    PlainSerializer(format_kube_time, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A timezone-aware datetime held in UTC at whole seconds, written as RFC 3339."""


class OmitEmptyModel(KubeModel):
    """A KubeModel whose empty maps and lists are left out when written, like Go's
    omitempty: a body we write never carries an ownerReferences: [] that a merge patch
    would read as "remove them all", and equal content always serializes the same."""

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v not in ({}, [], ())}


class OwnerReference(KubeModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(OmitEmptyModel):
    """The metadata fields this controller reads or writes."""

    name: str
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: KubeTime | None = None
    deletion_timestamp: KubeTime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: tuple[str, ...] = ()
    owner_references: tuple[OwnerReference, ...] = ()


class KubeObject(Protocol):
    """A typed view of a stored object: its metadata (whose resourceVersion preconditions a
    write), parsed from and written back to a Kubernetes body (`KubeModel` provides those)."""

    @property
    def metadata(self) -> ObjectMeta: ...

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> Self: ...

    def to_dict(self) -> dict[str, Any]: ...

    def fields_read(self) -> dict[str, Any]: ...


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(KubeModel):
    """metav1.Condition."""

    type: str = Field(min_length=1, max_length=316)
    status: ConditionStatus
    observed_generation: int | None = Field(default=None, ge=0)
    last_transition_time: KubeTime
    reason: str = Field(max_length=1024)
    message: str = Field(max_length=32768)


def find_condition(conditions: Iterable[Condition], type_: str) -> Condition | None:
    """The condition of that type, if present."""
    return next((c for c in conditions if c.type == type_), None)


def condition_is_true(conditions: Iterable[Condition], type_: str) -> bool:
    """Whether a condition of that type is present with status True."""
    found = find_condition(conditions, type_)
    return found is not None and found.status == "True"


def set_condition(conditions: Iterable[Condition], new: Condition) -> tuple[Condition, ...]:
    """Add or replace a condition, as apimachinery's meta.SetStatusCondition does.

    The transition time moves only when the status does, so a reconciler that writes the
    same observation twice produces an identical list (and so no write).
    """
    out: list[Condition] = []
    replaced = False
    for c in conditions:
        if c.type != new.type:
            out.append(c)
            continue
        replaced = True
        if c.status == new.status:
            new = new.model_copy(update={"last_transition_time": c.last_transition_time})
        out.append(new)
    if not replaced:
        out.append(new)
    return tuple(out)
