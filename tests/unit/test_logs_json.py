"""JSON logs: the fields a reconcile passes with `extra=` come out as top-level JSON fields.

A GangNodePool reconcile runs over small fakes (a deleted pool whose stack is prepared, so
the pass destroys it) with the root logger set up as `atomic-gang controller --log-format
json` sets it; its log line is parsed back as JSON.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner import logs
from provisioner.api.clock import FakeClock
from provisioner.api.constants import POOL_LABEL
from provisioner.api.settings import Settings
from provisioner.controllers.gangnodepool import GangNodePoolReconciler
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.stack_executor import StackExecutor
from provisioner.kube.resources import ObjectKey
from tests.support.backends import UNREACHED_BACKEND
from tests.support.pool_reconciler import pool_deps

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate(
    {
        "clusterName": "c1",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {"region": "us-east-1", "nodeRoleArn": "arn:aws:iam::123456789012:role/node"},
    }
)
POOL: dict[str, Any] = {
    "apiVersion": "atomic-gang.k8s.aws/v1alpha1",
    "kind": "GangNodePool",
    "metadata": {
        "name": "pool-a",
        "uid": "uid-a",
        "resourceVersion": "7",
        "finalizers": ["atomic-gang.k8s.aws/release"],
        "deletionTimestamp": "2026-11-29T11:59:00Z",
    },
    "spec": {
        "pool": "pool-a",
        "count": 2,
        "instanceType": "m5.large",
        "mode": "runinstances",
        "region": "us-east-1",
        "nodeRoleArn": "arn:aws:iam::123456789012:role/node",
        "keepWarmTTL": "10m",
        "maxLifetime": "4h",
        "amiVariant": "standard",
    },
    "status": {"phase": "Idle", "acquireGeneration": 3},
}


class _Informer:
    def __init__(self, items: Sequence[dict[str, Any]]) -> None:
        self._items = list(items)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next((i for i in self._items if i["metadata"]["name"] == name), None)

    def list(self) -> list[dict[str, Any]]:
        return list(self._items)

    def list_labelled(self, pool: str) -> list[dict[str, Any]]:
        return [
            i for i in self._items if (i["metadata"].get("labels") or {}).get(POOL_LABEL) == pool
        ]


class _Kube:
    def patch_status(self, ref: Any, name: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {**POOL, "status": {**POOL["status"], **body["status"]}}


class _Engine:
    def find_managed(self, cluster: str, pool: str, **_: Any) -> list[Any]:
        return []

    def describe(self, ids: Sequence[str]) -> list[Any]:
        return []


class _Stacks:
    destroyed: list[str]

    def __init__(self) -> None:
        self.destroyed = []

    def is_prepared(self, pool: str) -> bool:
        return True

    def outputs(self, pool: str) -> Any:
        return object()  # prepared; this pool is past its launch, so nothing reads it

    def destroy(self, pool: str) -> None:
        self.destroyed.append(pool)


class _Recorder:
    def record(self, *_: Any) -> None:
        pass


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    logs.configure("INFO", "json", stream)
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def test_a_reconciles_log_line_is_json_with_pool_and_generation(json_log: io.StringIO) -> None:
    stacks = _Stacks()
    executor = StackExecutor(1, on_finished=lambda _pool: None, metrics=ControllerMetrics())
    engine, metrics = _Engine(), ControllerMetrics()
    reconciler = GangNodePoolReconciler(
        pool_deps(
            settings=SETTINGS,
            kube=_Kube(),
            pools=_Informer([POOL]),
            nodes=_Informer([]),
            engine=engine,
            index=InstanceIndex(engine, "c1", 10, FakeClock(), metrics),
            stacks=stacks,
            executor=executor,
            recorder=_Recorder(),
            now=lambda: NOW,
            metrics=metrics,
        )
    )
    reconciler.reconcile(ObjectKey("", "pool-a"))
    assert executor.run_next(timeout=0)
    assert stacks.destroyed == ["pool-a"]
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    ours = [x for x in lines if x["logger"] == "provisioner.controllers.gangnodepool"]
    assert ours, lines
    first = ours[0]
    assert first["pool"] == "pool-a"
    assert first["generation"] == 3
    assert first["action"] == "destroy"
    assert first["level"] == "INFO" and first["time"].endswith("Z")
    assert "pool-a" in first["message"]


def test_unserialisable_fields_and_exceptions_still_make_one_json_line() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("tests.logs.json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.exception("failed", extra={"stack_operation": "up", "when": NOW, "ids": {1}})
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    (line,) = stream.getvalue().splitlines()
    doc = json.loads(line)
    assert doc["stack_operation"] == "up"
    assert doc["when"] == str(NOW)
    assert "RuntimeError: boom" in doc["exception"]


def test_the_text_format_stays_the_default_outside_the_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(logs.ENV_FORMAT, raising=False)
    assert logs.default_format() == "text"
    monkeypatch.setenv(logs.ENV_FORMAT, "json")
    assert logs.default_format() == "json"
    with pytest.raises(ValueError, match="text, json"):
        logs.configure("INFO", "yaml")
