"""GangNodePool: the JSON round trip, and the CRD kept in step with the models."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from provisioner.api import constants as c
from provisioner.api.gangnodepool import (
    PRINTER_COLUMNS,
    GangNodePool,
    GangNodePoolSpec,
    GangNodePoolStatus,
    Phase,
    StackOperation,
    StackResult,
    load_crd,
)
from provisioner.api.meta import Condition, set_condition
from tests.support.pools import claim, pool_spec

pytestmark = pytest.mark.unit

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)

BODY: dict[str, Any] = {
    "apiVersion": "atomic-gang.k8s.aws/v1alpha1",
    "kind": "GangNodePool",
    "metadata": {
        "name": "pretrain-p4d",
        "uid": "6f1c1c9e-5a39-4c1e-9d5e-2b1f0f9c0a11",
        "resourceVersion": "4242",
        "generation": 3,
        "creationTimestamp": "2025-03-01T11:58:00Z",
        "finalizers": ["atomic-gang.k8s.aws/release"],
    },
    "spec": pool_spec(
        pool="pretrain-p4d",
        availability_zones=["us-east-1a", "us-east-1b"],
        subnets=[],
        keep_warm_ttl="15m0s",
        max_lifetime="6h0m0s",
        capacity_reservation_id="cr-0123456789abcdef0",
        efa=True,
        placement_group="cluster",
        pod_requests={"cpu": "90", "memory": "1000Gi", "nvidia.com/gpu": "8"},
        claim=claim(
            namespace="default",
            name="job-allreduce-pretrain-3c1f2",
            uid="0b6a2c86-1111-4a2b-9c0d-123456789abc",
            claimed_at="2025-03-01T11:58:01Z",
        ),
    ),
    "status": {
        "phase": "Joining",
        "observedGeneration": 3,
        "acquireGeneration": 2,
        "activeGroup": "g2",
        "instanceIds": [
            "i-0123456789abcdef0",
            "i-0123456789abcdef1",
            "i-0123456789abcdef2",
            "i-0123456789abcdef3",
        ],
        "readyNodes": 2,
        "unusableNodes": [
            {
                "node": "ip-10-0-1-7.ec2.internal",
                "instanceId": "i-0123456789abcdef2",
                "missing": ["nvidia.com/gpu: 0 of 8 allocatable"],
            }
        ],
        "consecutiveShortfalls": 0,
        "consecutiveUnknownErrors": 0,
        "consecutiveFailures": 0,
        "lastShortfallTime": "2025-03-01T11:59:00Z",
        "joinDeadline": "2025-03-01T12:10:00Z",
        "launchInProgress": {
            "clientToken": "6f1c1c9e-2",
            "mode": "runinstances",
            "group": "g2",
            "startedAt": "2025-03-01T11:59:30Z",
        },
        "releaseInProgress": {
            "startedAt": "2025-03-01T11:59:40Z",
            "reason": "JoinDeadlineExceeded",
            "instanceIds": ["i-0123abcd"],
            "networkInterfaceIds": ["eni-0123456789abcdef0"],
        },
        "stackName": "pretrain-p4d",
        "lastStackOperation": "prepare",
        "lastStackResult": "succeeded",
        "lastError": {"reason": "InsufficientInstanceCapacity", "message": "us-east-1a short"},
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "observedGeneration": 3,
                "lastTransitionTime": "2025-03-01T11:59:30Z",
                "reason": "Joining",
                "message": "2 of 4 nodes are Ready",
            }
        ],
    },
}


def test_round_trip_is_exact() -> None:
    pool = GangNodePool.from_dict(BODY)
    assert pool.name == "pretrain-p4d"
    assert pool.spec.keep_warm_ttl == timedelta(minutes=15)
    assert pool.spec.claim is not None
    assert pool.spec.claim.claimed_at == datetime(2025, 3, 1, 11, 58, 1, tzinfo=UTC)
    assert pool.status.launch_in_progress is not None
    assert pool.status.launch_in_progress.client_token == "6f1c1c9e-2"
    assert pool.to_dict() == BODY
    assert GangNodePool.from_dict(pool.to_dict()) == pool


def test_new_pool_omits_unset_fields() -> None:
    spec = GangNodePoolSpec.model_validate({k: v for k, v in BODY["spec"].items() if k != "claim"})
    pool = GangNodePool(metadata={"name": "pretrain-p4d"}, spec=spec)  # type: ignore[arg-type]
    body = pool.to_dict()
    assert body["apiVersion"] == c.API_VERSION and body["kind"] == c.GNP_KIND
    assert "claim" not in body["spec"]
    assert body["status"] == {
        "phase": "Idle",
        "observedGeneration": 0,
        "acquireGeneration": 0,
        "instanceIds": [],
        "readyNodes": 0,
        "consecutiveShortfalls": 0,
        "consecutiveUnknownErrors": 0,
        "consecutiveFailures": 0,
        "conditions": [],
    }
    beyond_shape = (
        "claim",
        "ownerNamespace",
        "podRequests",
        "gangClass",
        "fieldSources",
        "purchasePolicy",
        "queued",
    )
    assert spec.shape().model_dump() == {
        k: v for k, v in spec.model_dump().items() if k not in beyond_shape
    }


def test_times_are_utc_whole_seconds() -> None:
    status = GangNodePoolStatus(
        keep_warm_until=datetime(2025, 3, 1, 14, 0, 0, 999, tzinfo=UTC).astimezone()
    )
    assert status.to_dict()["keepWarmUntil"] == "2025-03-01T14:00:00Z"
    with pytest.raises(ValidationError):
        GangNodePoolStatus(keep_warm_until=datetime(2025, 3, 1))  # naive time


def test_bad_status_values_are_refused() -> None:
    with pytest.raises(ValidationError):
        GangNodePoolStatus.model_validate({"phase": "Running"})
    with pytest.raises(ValidationError):
        GangNodePoolStatus.model_validate({"instanceIds": ["vol-0123abcd"]})
    with pytest.raises(ValidationError):
        GangNodePoolStatus.model_validate({"acquireGeneration": -1})


def test_the_crd_lists_exactly_the_phases_in_their_order() -> None:
    schema = load_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    phase = schema["properties"]["status"]["properties"]["phase"]
    assert tuple(phase["enum"]) == tuple(p.value for p in Phase)


@pytest.mark.parametrize(
    ("wire", "typed"),
    [
        ("succeeded", StackResult.succeeded()),
        ("failed: BackendUnavailable", StackResult.failed("BackendUnavailable")),
        ("failed: ", StackResult.failed("")),
    ],
)
def test_the_stack_result_is_typed_and_written_as_the_same_text(
    wire: str, typed: StackResult
) -> None:
    status = GangNodePoolStatus.model_validate(
        {"lastStackOperation": "remove-set", "lastStackResult": wire}
    )
    assert status.last_stack_result == typed
    assert status.last_stack_operation is StackOperation.REMOVE_SET
    body = status.to_dict()
    assert (body["lastStackOperation"], body["lastStackResult"]) == ("remove-set", wire)


def test_a_stack_operation_or_result_of_no_known_form_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="lastStackResult 'done'"):
        GangNodePoolStatus.model_validate({"lastStackResult": "done"})
    with pytest.raises(ValueError, match="remove-set"):
        GangNodePoolStatus.model_validate({"lastStackOperation": "up"})


def test_the_recorded_group_is_its_own_field_and_older_records_read_as_it() -> None:
    status = GangNodePoolStatus.model_validate({"lastStackOperation": "record:gen-4"})
    assert status.last_stack_operation is StackOperation.RECORD and status.recorded_group == "gen-4"
    body = status.to_dict()
    assert (body["lastStackOperation"], body["recordedGroup"]) == ("record", "gen-4")
    # A newer record wins over the older form's group, and other operations stay as written.
    newer = {"lastStackOperation": "record:gen-4", "recordedGroup": "gen-5"}
    assert GangNodePoolStatus.model_validate(newer).recorded_group == "gen-5"
    prepared = GangNodePoolStatus.model_validate({"lastStackOperation": "prepare"})
    assert (
        prepared.last_stack_operation is StackOperation.PREPARE and prepared.recorded_group is None
    )


def test_set_condition_moves_time_only_on_status_change() -> None:
    ready = Condition(type="Ready", status="False", last_transition_time=T0, reason="A", message="")
    later = T0 + timedelta(minutes=5)
    same = set_condition((ready,), ready.model_copy(update={"last_transition_time": later}))
    assert same == (ready,)
    flipped = set_condition(
        (ready,),
        Condition(type="Ready", status="True", last_transition_time=later, reason="B", message=""),
    )
    assert flipped[0].last_transition_time == later and flipped[0].status == "True"
    added = set_condition(flipped, ready.model_copy(update={"type": "Other"}))
    assert [cond.type for cond in added] == ["Ready", "Other"]


# --- the CRD -----------------------------------------------------------------------------

CRD = load_crd()
VERSION = CRD["spec"]["versions"][0]
COMPARED = ("type", "enum", "pattern", "minimum", "maxLength", "minLength", "format")


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return _resolve(defs[node["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in node:  # X | None: the CRD just leaves the field out
        (only,) = [n for n in node["anyOf"] if n.get("type") != "null"]
        return _resolve(only, defs)
    return node


def _differences(
    model: dict[str, Any], crd: dict[str, Any], defs: dict[str, Any], path: str
) -> list[str]:
    model = _resolve(model, defs)
    out = [
        f"{path}: {key} model={model.get(key)!r} crd={crd.get(key)!r}"
        for key in COMPARED
        if model.get(key) != crd.get(key)
    ]
    if set(model.get("required", [])) != set(crd.get("required", [])):
        out.append(f"{path}: required model={model.get('required')} crd={crd.get('required')}")
    model_props, crd_props = model.get("properties", {}), crd.get("properties", {})
    out += [f"{path}.{name}: only in the models" for name in model_props.keys() - crd_props]
    out += [f"{path}.{name}: only in the CRD" for name in crd_props.keys() - model_props]
    for name in model_props.keys() & crd_props.keys():
        out += _differences(model_props[name], crd_props[name], defs, f"{path}.{name}")
    if "items" in model or "items" in crd:
        out += _differences(model.get("items", {}), crd.get("items", {}), defs, f"{path}[]")
    return out


def test_crd_schema_is_in_step_with_the_models() -> None:
    schema = GangNodePool.model_json_schema(by_alias=True, mode="serialization")
    defs = schema["$defs"]
    crd = VERSION["schema"]["openAPIV3Schema"]
    problems: list[str] = []
    for part in ("spec", "status"):
        problems += _differences(schema["properties"][part], crd["properties"][part], defs, part)
    assert problems == []
    assert set(crd["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}


def test_crd_names_scope_and_columns() -> None:
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == f"{c.GNP_PLURAL}.{c.GROUP}"
    assert spec["group"] == c.GROUP
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == c.GNP_KIND
    assert spec["names"]["plural"] == c.GNP_PLURAL
    assert spec["names"]["singular"] == c.GNP_SINGULAR
    assert spec["names"]["shortNames"] == [c.GNP_SHORT_NAME]
    assert VERSION["name"] == c.VERSION and VERSION["served"] and VERSION["storage"]
    assert VERSION["subresources"] == {"status": {}}
    assert VERSION["additionalPrinterColumns"] == list(PRINTER_COLUMNS)
    # The default view keeps the reference's columns; -o wide (priority 1) adds the claim,
    # the reservation and the last error.
    default = [col["name"] for col in PRINTER_COLUMNS if not col.get("priority")]
    wide = [col["name"] for col in PRINTER_COLUMNS if col.get("priority") == 1]
    assert default == ["PHASE", "READY", "COUNT", "TYPE", "MODE", "AGE"]
    assert wide == ["CLAIM NAMESPACE", "CLAIM", "RESERVATION", "LAST ERROR", "NOT USABLE"]


def test_printer_columns_point_at_real_fields() -> None:
    body = GangNodePool.from_dict(BODY).to_dict()
    for column in PRINTER_COLUMNS:
        node: Any = body
        for part in column["jsonPath"].strip(".").split("."):
            name, _, index = part.partition("[")
            node = node[name]
            if index:  # "[0]": the first entry
                node = node[int(index.rstrip("]"))]
        assert node is not None
