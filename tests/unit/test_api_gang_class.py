"""GangClass: the overlay of a Job's allowed annotations on its class, the derived pool,
the class's own problems, and the CRD kept in step with the model."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from provisioner.api import constants as c
from provisioner.api.gang_class import (
    CLASS_PRINTER_COLUMNS,
    FieldSource,
    GangClass,
    class_annotations,
    class_problems,
    derived_pool_name,
    load_class_crd,
    read_gang_shape,
)
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShapeError
from tests.support.backends import UNREACHED_BACKEND
from tests.unit.test_api_gangnodepool import _differences

pytestmark = pytest.mark.unit

ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
SETTINGS = Settings.model_validate(
    {
        "cluster_name": "demo",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {"region": "us-east-1", "node_role_arn": ROLE},
    }
)
QUEUE = {c.QUEUE_NAME_LABEL: "gang-queue"}


def gang_class(name: str = "gpu", **spec: Any) -> GangClass:
    body = {"instanceType": "p4d.24xlarge", "mode": "fleet", "keepWarmTTL": "20m", **spec}
    # None leaves a field out (a class without an instance type).
    body = {k: v for k, v in body.items() if v is not None}
    return GangClass.from_dict({"metadata": {"name": name}, "spec": body})


@dataclass(frozen=True)
class Case:
    name: str
    annotations: dict[str, str] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    pods: int = 4
    # Expected: fields of the shape, or the words every refusal must hold.
    shape: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, FieldSource] = field(default_factory=dict)
    refused: tuple[str, ...] = ()


CASES = [
    Case(
        "only the queue label: the class decides, the pods count",
        shape={"count": 4, "instance_type": "p4d.24xlarge", "mode": "fleet"},
        sources={
            "count": FieldSource.PODS,
            "instance-type": FieldSource.CLASS,
            "mode": FieldSource.CLASS,
            "max-lifetime": FieldSource.DEFAULT,
            "pool": FieldSource.DERIVED,
        },
    ),
    Case(
        "an allowed annotation wins over the class",
        annotations={c.ANN_MODE: "runinstances"},
        spec={"jobOverrides": ["mode"]},
        shape={"mode": "runinstances", "instance_type": "p4d.24xlarge"},
        sources={"mode": FieldSource.ANNOTATION, "instance-type": FieldSource.CLASS},
    ),
    Case(
        "an annotation the class does not allow is refused naming the class and the fix",
        annotations={c.ANN_INSTANCE_TYPE: "p5.48xlarge"},
        refused=(
            f"Annotation {c.ANN_INSTANCE_TYPE}",
            "GangClass gpu",
            'add "instance-type" to GangClass gpu\'s spec.jobOverrides',
        ),
    ),
    Case(
        "count is always allowed, and still checked against the pods",
        annotations={c.ANN_COUNT: "3"},
        refused=("the Job runs 4 pods",),
    ),
    Case(
        "a matching count annotation is the Job's",
        annotations={c.ANN_COUNT: "4"},
        sources={"count": FieldSource.ANNOTATION},
    ),
    Case(
        "the pool label keeps naming the pool",
        labels={c.POOL_LABEL: "team-pool"},
        shape={"pool": "team-pool"},
        sources={"pool": FieldSource.ANNOTATION},
    ),
    Case(
        "a class value the rules refuse names the class's field",
        spec={"keepWarmTTL": "40d"},
        refused=("GangClass gpu (spec.keepWarmTTL) sets", c.ANN_KEEP_WARM_TTL),
    ),
    Case(
        "a Job's zones replace the class's subnets",
        annotations={c.ANN_AVAILABILITY_ZONES: "us-east-1b"},
        spec={"subnets": ["subnet-0123456789abcdef0"], "jobOverrides": ["availability-zones"]},
        shape={"availability_zones": ("us-east-1b",), "subnets": ()},
    ),
    Case(
        "the class's placement: zones, EFA and a cluster placement group",
        spec={"availabilityZones": ["us-east-1a"], "efa": True, "placementGroup": "cluster"},
        shape={"availability_zones": ("us-east-1a",), "efa": True, "placement_group": "cluster"},
    ),
    Case(
        "a class without an instance type lets the Job name it when allowed",
        annotations={c.ANN_INSTANCE_TYPE: "m5.large"},
        spec={"instanceType": None, "jobOverrides": ["instance-type"]},
        shape={"instance_type": "m5.large"},
    ),
    Case(
        "an unknown annotation under the prefix is still refused",
        annotations={f"{c.PREFIX}instance-typ": "m5.large"},
        refused=("did you mean",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_job_is_read_through_its_class(case: Case) -> None:
    cls = gang_class(**case.spec)
    labels = {**QUEUE, **case.labels}
    if case.refused:
        with pytest.raises(GangShapeError) as err:
            read_gang_shape(
                labels, case.annotations, case.pods, SETTINGS, gang_class=cls, namespace="team-a"
            )
        for words in case.refused:
            assert words in str(err.value), str(err.value)
        return
    read = read_gang_shape(
        labels, case.annotations, case.pods, SETTINGS, gang_class=cls, namespace="team-a"
    )
    assert read.gang_class == "gpu"
    for name, value in case.shape.items():
        assert getattr(read.shape, name) == value, name
    for name, source in case.sources.items():
        assert read.sources[name] == source, name


def test_without_a_class_the_reference_rules_hold_unchanged() -> None:
    with pytest.raises(GangShapeError) as err:
        read_gang_shape(QUEUE, {}, 4, SETTINGS)
    assert c.POOL_LABEL in str(err.value) and c.ANN_COUNT in str(err.value)
    labels = {**QUEUE, c.POOL_LABEL: "p"}
    read = read_gang_shape(labels, {c.ANN_COUNT: "4", c.ANN_INSTANCE_TYPE: "m5.large"}, 4, SETTINGS)
    assert read.gang_class is None and read.shape.pool == "p"
    assert read.sources["instance-type"] == FieldSource.ANNOTATION
    assert read.sources["mode"] == FieldSource.DEFAULT


# --- the derived pool --------------------------------------------------------------------


def _shape(**annotations: str) -> Any:
    return read_gang_shape(
        QUEUE, annotations, 4, SETTINGS, gang_class=gang_class(jobOverrides=["keep-warm-ttl"])
    ).shape


def test_the_derived_pool_is_stable_readable_and_per_namespace_class_and_shape() -> None:
    shape = _shape()
    name = derived_pool_name("team-a", "gpu", shape)
    # Pinned: a controller upgrade must not rename the warm pools of every namespace.
    assert name == derived_pool_name("team-a", "gpu", shape)
    assert re.fullmatch(r"team-a-gpu-p4d-24xlarge-[0-9a-f]{8}", name), name
    assert derived_pool_name("team-b", "gpu", shape) != name
    assert derived_pool_name("team-a", "cpu", shape) != name
    # keep-warm-ttl is not a field a claimant must share: the same pool.
    assert derived_pool_name("team-a", "gpu", _shape(**{c.ANN_KEEP_WARM_TTL: "5m"})) == name
    other = read_gang_shape(QUEUE, {}, 8, SETTINGS, gang_class=gang_class()).shape
    assert derived_pool_name("team-a", "gpu", other) != name


@pytest.mark.parametrize(
    ("namespace", "class_name"),
    [
        ("a" * 63, "b" * 253),
        ("team-a", "gpu.example.com"),
        ("x", "y"),
        ("n" * 50, "c-"),
    ],
)
def test_the_derived_pool_is_a_valid_label_value_and_object_name(
    namespace: str, class_name: str
) -> None:
    name = derived_pool_name(namespace, class_name, _shape())
    assert len(name) <= 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name


def test_a_long_namespace_keeps_distinct_pools_apart() -> None:
    # Cut to the same readable prefix, the hash still tells them apart.
    a = derived_pool_name("n" * 60 + "a", "gpu", _shape())
    b = derived_pool_name("n" * 60 + "b", "gpu", _shape())
    assert a != b and a[:-8] == b[:-8]


# --- the class's own problems ------------------------------------------------------------


def test_a_usable_class_has_no_problems() -> None:
    assert class_problems(gang_class(), SETTINGS) == []
    no_type = GangClass.from_dict(
        {"metadata": {"name": "any"}, "spec": {"jobOverrides": ["instance-type"]}}
    )
    assert class_problems(no_type, SETTINGS) == []


def test_a_class_no_job_could_use_is_named() -> None:
    no_type = GangClass.from_dict({"metadata": {"name": "any"}, "spec": {}})
    (problem,) = class_problems(no_type, SETTINGS)
    assert "instance-type is not set" in problem and "spec.jobOverrides" in problem
    (bad,) = class_problems(gang_class(mode="fleet", region="eu-west-1"), SETTINGS)
    assert bad.startswith("GangClass gpu (spec.region) sets"), bad


def test_job_overrides_are_gang_annotations() -> None:
    with pytest.raises(ValidationError, match="not a gang annotation"):
        gang_class(jobOverrides=["pool"])
    assert gang_class(jobOverrides=["efa"]).allows(c.ANN_EFA)
    assert gang_class().allows(c.ANN_COUNT) and not gang_class().allows(c.ANN_EFA)


def test_class_annotations_spell_the_class_as_a_job_would() -> None:
    cls = gang_class(efa=True, availabilityZones=["us-east-1a", "us-east-1b"])
    assert class_annotations(cls) == {
        c.ANN_INSTANCE_TYPE: "p4d.24xlarge",
        c.ANN_MODE: "fleet",
        c.ANN_KEEP_WARM_TTL: "20m",
        c.ANN_EFA: "true",
        c.ANN_AVAILABILITY_ZONES: "us-east-1a,us-east-1b",
    }


# --- the CRD -----------------------------------------------------------------------------

CRD = load_class_crd()
VERSION = CRD["spec"]["versions"][0]


def test_crd_schema_is_in_step_with_the_model() -> None:
    schema = GangClass.model_json_schema(by_alias=True, mode="serialization")
    crd = VERSION["schema"]["openAPIV3Schema"]
    problems = _differences(
        schema["properties"]["spec"], crd["properties"]["spec"], schema["$defs"], "spec"
    )
    assert problems == []
    assert set(crd["properties"]) == {"apiVersion", "kind", "metadata", "spec"}


def test_crd_names_scope_and_columns() -> None:
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == f"{c.GANG_CLASS_PLURAL}.{c.GROUP}"
    assert spec["group"] == c.GROUP and spec["scope"] == "Cluster"
    names = spec["names"]
    assert (names["kind"], names["plural"], names["singular"]) == (
        c.GANG_CLASS_KIND,
        c.GANG_CLASS_PLURAL,
        c.GANG_CLASS_SINGULAR,
    )
    assert names["shortNames"] == [c.GANG_CLASS_SHORT_NAME]
    assert VERSION["name"] == c.VERSION and VERSION["served"] and VERSION["storage"]
    assert VERSION["additionalPrinterColumns"] == list(CLASS_PRINTER_COLUMNS)
