"""The AdmissionCheck reconciler: our checks get `Active` once, others are left alone."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.kueue_objects import admission_check
from provisioner.api.workload import AdmissionCheck
from provisioner.controllers.admissioncheck import AdmissionCheckReconciler
from provisioner.kube.cache import TypedCache
from provisioner.kube.resources import ADMISSION_CHECKS, ObjectKey
from tests.support.stored_objects import StoredObjects

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class StoreCache:
    """An informer that holds exactly what the store holds (no lag)."""

    def __init__(self, store: StoredObjects) -> None:
        self.store = store

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.store.objects.get((ADMISSION_CHECKS.plural, "", name))
        return dict(found) if found is not None else None

    def add_handlers(self, **_: Callable[..., None]) -> None:
        """Nothing is deleted here."""


def reconciler() -> tuple[StoredObjects, AdmissionCheckReconciler]:
    store = StoredObjects()
    checks = TypedCache(StoreCache(store), AdmissionCheck.from_dict)  # type: ignore[arg-type]
    return store, AdmissionCheckReconciler(store, checks, c.CONTROLLER_NAME, lambda: NOW)


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
