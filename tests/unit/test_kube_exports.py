"""The public surface of `provisioner/kube`: what each module exports exists, and the
package re-exports the names controllers use."""

from __future__ import annotations

import importlib

import pytest

import provisioner.kube as kube

MODULES = [
    "cache",
    "check_state",
    "client",
    "errors",
    "events",
    "informer",
    "leader",
    "own_writes",
    "pool_reads",
    "resources",
    "status",
    "workqueue",
]


@pytest.mark.parametrize("name", MODULES)
def test_every_exported_name_exists(name: str) -> None:
    module = importlib.import_module(f"provisioner.kube.{name}")
    assert module.__doc__, f"{name} needs a docstring saying what it does and who calls it"
    missing = [symbol for symbol in module.__all__ if not hasattr(module, symbol)]
    assert missing == []


def test_the_package_surface() -> None:
    assert sorted(kube.__all__) == kube.__all__
    assert set(kube.__all__) == {
        "Clock",
        "Controller",
        "EventRecorder",
        "FakeClock",
        "Informer",
        "KubeAlreadyExists",
        "KubeClient",
        "KubeConflict",
        "KubeError",
        "KubeForbidden",
        "KubeGone",
        "KubeInvalid",
        "KubeNotFound",
        "KubeUnavailable",
        "LeaderElector",
        "LeaseLock",
        "ObjectKey",
        "ObjectList",
        "ResourceRef",
        "Result",
        "SystemClock",
        "TypedCache",
        "WorkQueue",
        "key_of",
        "update_object",
        "update_status",
    }
    for symbol in kube.__all__:
        assert getattr(kube, symbol) is not None
