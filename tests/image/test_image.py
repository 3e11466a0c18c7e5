"""The image, run as the chart runs it, does the product's job against the embedded default.

One container (see conftest) serves the whole module: its webhook refuses a broken gang Job
at create, naming the field; then a gang Job goes from submit to check Ready, runs, and is
released (keep-warm expiry, then the pool's deletion destroys its stack), with the
container's JSON log lines carrying the pool and the generation.
"""

from __future__ import annotations

import base64
import json
import urllib.request
import uuid
from typing import Any

import pytest
from kubernetes import client as k8s  # type: ignore[import-untyped]

from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.e2e.conftest import GNP, check_state, phase, submit, workload_of
from tests.image.conftest import ImageInstall
from tests.integration.test_webhook_apiserver import GANG_ANNOTATIONS, GANG_LABELS, job, refusal
from tests.integration.test_webhook_apiserver import register as register_webhook
from tests.support.charted_metrics import metric_names
from tests.support.waiting import eventually

POOL = "img-pool"
# The first test's setup builds the image when its inputs changed (minutes on vfs).
pytestmark = pytest.mark.timeout(3600)


def test_the_images_webhook_refuses_a_broken_gang_job_naming_the_field(
    install: tuple[ImageInstall, dict[str, Any]], image_env: LocalEnvironment, kube_api: Any
) -> None:
    running, rendered = install
    namespace = image_env.queue_namespaces[0]
    config = rendered["webhook"]
    config["metadata"] = {"name": f"atomic-gang-image-{uuid.uuid4().hex[:8]}"}
    for hook in config["webhooks"]:
        # No Service network here: the apiserver reaches the container on the host network.
        hook["clientConfig"] = {
            "url": f"https://127.0.0.1:{running.ports['webhook']}"
            + hook["clientConfig"]["service"]["path"],
            "caBundle": base64.b64encode(running.ca_pem).decode(),
        }
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    batch = k8s.BatchV1Api(kube_api)
    with register_webhook(kube_api, config, batch, namespace):
        body = job("mismatch", GANG_LABELS, {**GANG_ANNOTATIONS, c.ANN_COUNT: "3"})
        status = refusal(batch, namespace, body)
    assert status["code"] == 422, status["message"]
    assert status["details"]["causes"][0]["field"] == f"metadata.annotations[{c.ANN_COUNT}]"
    assert "atomic-gang.k8s.aws/count" in status["message"]
    assert batch.list_namespaced_job(namespace).items == []


def test_a_gang_job_goes_from_submit_to_ready_to_release_through_the_container(
    install: tuple[ImageInstall, dict[str, Any]], image_env: LocalEnvironment, kube_api: Any
) -> None:
    running, _ = install
    env, namespace = image_env, image_env.queue_namespaces[0]
    custom = k8s.CustomObjectsApi(kube_api)
    submit(env, namespace, "train", POOL)

    eventually(
        lambda: check_state(workload_of(env, namespace, "train")) == "Ready",
        240,
        lambda: (
            f"check Ready (now {check_state(workload_of(env, namespace, 'train'))}, "
            f"pool {phase(env, POOL)})\n{running.logs()[-3000:]}"
        ),
    )
    pool = custom.get_cluster_custom_object(*GNP, POOL)
    ids = pool["status"]["instanceIds"]
    assert len(ids) == 2

    # The Job runs (the Job simulator completes it); the claim drops; keep-warm (5 s) expires
    # and the set is released; deleting the pool destroys its stack through the finalizer.
    eventually(
        lambda: (
            phase(env, POOL) == Phase.IDLE
            and not (custom.get_cluster_custom_object(*GNP, POOL).get("status") or {}).get(
                "instanceIds"
            )
        ),
        180,
        lambda: f"pool released to Idle (now {phase(env, POOL)})",
    )
    custom.delete_cluster_custom_object(*GNP, POOL)
    eventually(
        lambda: phase(env, POOL) is None, 120, "pool deleted through the container's finalizer"
    )
    states = {
        i["InstanceId"]: i["State"]["Name"]
        for r in env.ec2_client().describe_instances(InstanceIds=ids)["Reservations"]
        for i in r["Instances"]
    }
    assert set(states.values()) <= {"shutting-down", "terminated"}, states

    # The container's log is JSON lines; a reconcile's line names the pool and generation.
    lines = running.json_logs()
    assert lines, running.logs()[-3000:]
    ours = [x for x in lines if x.get("pool") == POOL and "generation" in x]
    assert ours, [x.get("message") for x in lines][-40:]
    assert {"time", "level", "logger", "message"} <= set(ours[0])


def _exported_names(text: str) -> set[str]:
    """Every series name the exposition can carry, from its # TYPE lines (a labelled metric
    with no sample yet still has one)."""
    names: set[str] = set()
    suffixes = {
        "counter": ("_total",),
        "gauge": ("",),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
    }
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            # The text format names a counter with its _total in the TYPE line already.
            names |= {name} | {name + suffix for suffix in suffixes.get(kind, ("",))}
    return names


def test_every_dashboard_query_names_a_metric_the_controller_exports(
    install: tuple[ImageInstall, dict[str, Any]],
) -> None:
    running, rendered = install
    url = f"http://127.0.0.1:{running.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        exported = _exported_names(answer.read().decode())
    dashboard = json.loads(rendered["dashboard"]["data"]["atomic-gang-provisioner.json"])
    assert dashboard["panels"]
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            named = metric_names(target["expr"])
            assert named, f"{panel['title']}: no metric in {target['expr']!r}"
            assert named <= exported, f"{panel['title']}: {named - exported} not exported"
