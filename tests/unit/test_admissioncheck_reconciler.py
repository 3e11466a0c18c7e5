"""The AdmissionCheck reconciler: our checks get `Active` once, others are left alone."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.gang_class import GangClass
from provisioner.api.kueue_objects import admission_check
from provisioner.api.settings import Settings
from provisioner.api.workload import AdmissionCheck
from provisioner.controllers.admissioncheck import AdmissionCheckReconciler
from provisioner.kube.cache import TypedCache
from provisioner.kube.resources import ADMISSION_CHECKS, ObjectKey
from tests.support.backends import UNREACHED_BACKEND
from tests.support.stored_objects import StoredObjects

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = Settings.model_validate(
    {
        "cluster_name": "demo",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {
            "region": "us-east-1",
            "node_role_arn": "arn:aws:iam::123456789012:role/eks-gang-node-role",
        },
    }
)


class StoreCache:
    """An informer that holds exactly what the store holds (no lag)."""

    def __init__(self, store: StoredObjects) -> None:
        self.store = store

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.store.objects.get((ADMISSION_CHECKS.plural, "", name))
        return dict(found) if found is not None else None

    def list(self) -> list[dict[str, Any]]:
        return [
            dict(o)
            for (plural, _, _), o in self.store.objects.items()
            if plural == "admissionchecks"
        ]

    def add_handlers(self, **_: Callable[..., None]) -> None:
        """Nothing is deleted here."""


def reconciler(
    *classes: GangClass,
) -> tuple[StoredObjects, AdmissionCheckReconciler]:
    store = StoredObjects()
    checks = TypedCache(StoreCache(store), AdmissionCheck.from_dict)  # type: ignore[arg-type]
    named = {cls.name: cls for cls in classes}
    return store, AdmissionCheckReconciler(
        store, checks, c.CONTROLLER_NAME, lambda: NOW, classes=named.get, settings=SETTINGS
    )


def check(name: str, controller: str = c.CONTROLLER_NAME) -> dict[str, Any]:
    """The AdmissionCheck an install creates, at generation 2, for `controller`."""
    body = admission_check(name)
    body["metadata"]["generation"] = 2
    body["spec"]["controllerName"] = controller
    return body


def test_our_check_is_made_active_once() -> None:
    store, checks = reconciler()
    store.put(ADMISSION_CHECKS, check("ours"))
    checks.reconcile(ObjectKey("", "ours"))
    checks.reconcile(ObjectKey("", "ours"))
    (call,) = [call for call in store.calls if call["verb"] == "patch_status"]
    (condition,) = call["patch"]["status"]["conditions"]
    assert (condition["type"], condition["status"]) == (c.AC_ACTIVE, "True")
    assert condition["observedGeneration"] == 2
    assert call["field_manager"] == c.FIELD_MANAGER


def test_other_checks_and_missing_ones_are_left_alone() -> None:
    store, checks = reconciler()
    store.put(ADMISSION_CHECKS, check("theirs", "kueue.x-k8s.io/provisioning-request"))
    checks.reconcile(ObjectKey("", "theirs"))
    checks.reconcile(ObjectKey("", "missing"))
    assert [call for call in store.calls if call["verb"] != "get"] == []


def _naming(name: str, params: dict[str, str]) -> dict[str, Any]:
    body = check(name)
    body["spec"]["parameters"] = params
    return body


def _active(store: StoredObjects) -> dict[str, Any]:
    (call,) = [call for call in store.calls if call["verb"] == "patch_status"]
    (condition,) = call["patch"]["status"]["conditions"]
    return dict(condition)


CLASS_REF = {"apiGroup": c.GROUP, "kind": c.GANG_CLASS_KIND, "name": "gpu"}
GPU = GangClass.from_dict({"metadata": {"name": "gpu"}, "spec": {"instanceType": "p5.48xlarge"}})
# No instance type, and no Job may name one: no gang could run through it.
EMPTY = GangClass.from_dict({"metadata": {"name": "gpu"}, "spec": {}})


@pytest.mark.parametrize(
    ("classes", "params", "status", "reason", "words"),
    [
        ((GPU,), CLASS_REF, "True", c.AC_ACTIVE_REASON, "is running"),
        ((), CLASS_REF, "False", c.AC_REASON_CLASS_NOT_FOUND, "GangClass gpu"),
        ((EMPTY,), CLASS_REF, "False", c.AC_REASON_CLASS_INVALID, "instance-type is not set"),
        (
            (GPU,),
            {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "gpu"},
            "False",
            c.AC_REASON_BAD_PARAMETERS,
            "only a GangClass",
        ),
    ],
    ids=["usable", "missing", "unusable", "not-a-class"],
)
def test_a_check_is_active_only_when_its_class_can_serve_a_gang(
    classes: tuple[GangClass, ...], params: dict[str, str], status: str, reason: str, words: str
) -> None:
    store, checks = reconciler(*classes)
    store.put(ADMISSION_CHECKS, _naming("ours", params))
    checks.reconcile(ObjectKey("", "ours"))
    condition = _active(store)
    assert (condition["status"], condition["reason"]) == (status, reason)
    assert words in condition["message"], condition["message"]


def test_a_class_maps_to_the_checks_naming_it() -> None:
    store, checks = reconciler(GPU)
    store.put(ADMISSION_CHECKS, _naming("ours", CLASS_REF))
    store.put(ADMISSION_CHECKS, check("plain"))
    store.put(ADMISSION_CHECKS, _naming("theirs", CLASS_REF) | {"spec": {"controllerName": "x"}})
    assert checks.keys_for_class(GPU) == [ObjectKey("", "ours")]
