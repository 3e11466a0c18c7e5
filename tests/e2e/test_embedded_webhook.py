"""On the embedded default, a broken gang Job is refused at create by the chart's webhook.

`LocalEnvironment` registers the chart's own ValidatingWebhookConfiguration (its rules,
matchConditions and selectors; only the address differs). A Job whose count differs from
its pod count is refused naming the field. A Job with our annotations but no pool label is
refused naming the label on a queue without a GangClass (judged as the reference judges
it), and admitted on the local default's class queue, whose class derives its pool. A Job
that is not a gang Job is never sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv import kueue_objects as ko
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c


def _refused(batch: k8s.BatchV1Api, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(k8s.ApiException) as err:
        batch.create_namespaced_job(namespace, body)
    return dict(json.loads(err.value.body))


def test_broken_gang_jobs_are_refused_at_create_naming_the_field(
    gang_local: Callable[..., LocalEnvironment], namespace: str
) -> None:
    env = gang_local()
    assert env.webhook is not None and env.webhook.config is not None
    hook = env.webhook.config["webhooks"][0]
    assert "matchConditions" in hook and "objectSelector" not in hook
    batch = k8s.BatchV1Api(env.control_plane.api_client())  # type: ignore[union-attr]

    mismatch = ko.gang_job(namespace, "mismatch", ko.QUEUE_NAME, "pool-w", 2)
    mismatch["metadata"]["annotations"][c.ANN_COUNT] = "3"
    status = _refused(batch, namespace, mismatch)
    assert status["code"] == 422
    assert [x["field"] for x in status["details"]["causes"]] == [
        f"metadata.annotations[{c.ANN_COUNT}]"
    ]

    # A queue no ClusterQueue of ours backs has no class: the pool label is the Job's to give.
    no_pool = ko.gang_job(namespace, "no-pool", "queue-without-class", "pool-w", 2)
    del no_pool["metadata"]["labels"][c.POOL_LABEL]
    status = _refused(batch, namespace, no_pool)
    assert [x["field"] for x in status["details"]["causes"]] == [f"metadata.labels[{c.POOL_LABEL}]"]
    assert batch.list_namespaced_job(namespace).items == []

    # The same Job on the class queue: the class derives the pool, so it is admitted
    # (a dry run, so nothing is made).
    no_pool["metadata"]["labels"][c.QUEUE_NAME_LABEL] = ko.QUEUE_NAME
    made = batch.create_namespaced_job(namespace, no_pool, dry_run="All")
    assert c.POOL_LABEL not in (made.metadata.labels or {})
    assert batch.list_namespaced_job(namespace).items == []

    # Not a gang Job: never sent, created as it came (suspended, so nothing runs).
    plain = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "etl", "labels": {"app": "etl"}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "e", "image": "e"}]}
            },
        },
    }
    assert batch.create_namespaced_job(namespace, plain).metadata.name == "etl"
