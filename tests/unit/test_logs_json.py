"""JSON logs: the fields a reconcile passes with `extra=` come out as top-level JSON fields.

A GangNodePool reconcile runs over small fakes (a deleted pool whose stack is prepared, so
the pass destroys it) with the root logger set up as `atomic-gang controller --log-format
json` sets it; its log line is parsed back as JSON.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from provisioner import logs
from provisioner.api.clock import FakeClock
from provisioner.api.settings import Settings
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.kube.resources import ObjectKey
from tests.support.backends import UNREACHED_BACKEND
from tests.support.events import RecordedEvents
from tests.support.fake_engine import FakeEngine
from tests.support.fake_stacks import FakeStacks
from tests.support.informers import FakeInformer, FakePoolStore
from tests.support.pool_reconciler import pool_deps
from tests.support.pools import pool, pool_spec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate(
    {
        "clusterName": "c1",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {"region": "us-east-1", "nodeRoleArn": "arn:aws:iam::123456789012:role/node"},
    }
)
POOL = pool(
    uid="uid-a",
    resource_version="7",
    finalizers=["atomic-gang.k8s.aws/release"],
    deletion_timestamp="2026-11-29T11:59:00Z",
    spec=pool_spec(
        count=2,
        instance_type="m5.large",
        node_role_arn="arn:aws:iam::123456789012:role/node",
        ami_variant="standard",
    ),
    status={"phase": "Idle", "acquireGeneration": 3},
)


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
    stacks = FakeStacks(["pool-a"])
    executor = StackExecutor(1, on_finished=lambda _pool: None, metrics=ControllerMetrics())
    engine, metrics = FakeEngine(), ControllerMetrics()
    store = FakePoolStore(POOL)
    reconciler = GangNodePoolReconciler(
        pool_deps(
            settings=SETTINGS,
            kube=store,
            pools=store,
            nodes=FakeInformer(),
            engine=engine,
            index=InstanceIndex(engine, "c1", 10, FakeClock(), metrics),
            stacks=stacks,
            executor=executor,
            recorder=RecordedEvents(),
            now=lambda: NOW,
            metrics=metrics,
        )
    )
    reconciler.reconcile(ObjectKey("", "pool-a"))
    assert executor.run_next(timeout=0)
    assert stacks.destroyed == ["pool-a"]
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    ours = [x for x in lines if x["logger"] == "provisioner.controllers.pool.reconciler"]
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
