"""The local control plane is a real apiserver: our CRD and Kueue's are served and watched."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.support.pools import pool

KUEUE_API = (c.KUEUE_GROUP, c.KUEUE_VERSION)


def test_apiserver_reports_pinned_version(kube_api: Any) -> None:
    assert k8s.VersionApi(kube_api).get_code().git_version == "v1.36.3"


def test_gangnodepool_crd_is_served_with_short_name_and_columns(kube_api: Any) -> None:
    crd = k8s.ApiextensionsV1Api(kube_api).read_custom_resource_definition(
        f"{c.GNP_PLURAL}.{c.GROUP}"
    )
    assert crd.spec.scope == "Cluster"
    assert c.GNP_SHORT_NAME in crd.spec.names.short_names
    version = next(v for v in crd.spec.versions if v.name == c.VERSION)
    assert version.subresources.status is not None
    columns = [col.name.upper() for col in version.additional_printer_columns]
    default = [c.name.upper() for c in version.additional_printer_columns if not c.priority]
    # The reference's columns by default; `-o wide` adds the claim, reservation and error.
    assert default == ["PHASE", "READY", "COUNT", "TYPE", "MODE", "AGE"]
    assert columns[len(default) :] == [
        "CLAIM NAMESPACE",
        "CLAIM",
        "RESERVATION",
        "LAST ERROR",
        "NOT USABLE",
    ]


def test_gangnodepool_round_trips_through_the_apiserver(kube_api: Any) -> None:
    custom = k8s.CustomObjectsApi(kube_api)
    name = f"pool-{uuid.uuid4().hex[:8]}"
    body = pool(name)
    custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, body)
    try:
        read = custom.get_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, name)
        assert read["spec"]["count"] == 4
        assert read["spec"]["instanceType"] == "p4d.24xlarge"
        # The schema is enforced by the apiserver, not only by our models.
        bad = {**body, "metadata": {"name": f"{name}-bad"}, "spec": {**body["spec"], "count": 0}}
        try:
            custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, bad)
        except k8s.ApiException as err:
            assert err.status == 422 and "spec.count" in err.body
        else:
            raise AssertionError("a GangNodePool with count 0 was accepted")
        status = {"status": {"phase": Phase.ACQUIRING}}
        custom.patch_cluster_custom_object_status(c.GROUP, c.VERSION, c.GNP_PLURAL, name, status)
        read = custom.get_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, name)
        assert read["status"]["phase"] == Phase.ACQUIRING
    finally:
        custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, name)


def test_kueue_workload_is_created_read_back_and_seen_by_a_watch(
    kube_api: Any, kueue_crds: list[str], namespace: str
) -> None:
    assert "workloads.kueue.x-k8s.io" in kueue_crds
    custom = k8s.CustomObjectsApi(kube_api)
    seen: list[str] = []
    ready = threading.Event()

    listed = custom.list_namespaced_custom_object(*KUEUE_API, namespace, "workloads")
    since = listed["metadata"]["resourceVersion"]

    def observe() -> None:
        w = watch.Watch()
        ready.set()
        for event in w.stream(
            custom.list_namespaced_custom_object,
            *KUEUE_API,
            namespace,
            "workloads",
            resource_version=since,
            timeout_seconds=20,
        ):
            seen.append(f"{event['type']}:{event['object']['metadata']['name']}")
            if event["type"] == "ADDED":
                w.stop()

    watcher = threading.Thread(target=observe)
    watcher.start()
    ready.wait(5)
    workload = {
        "apiVersion": f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": {"name": "wl-probe", "namespace": namespace},
        "spec": {
            "queueName": "lq",
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "registry.local/x:1"}],
                        }
                    },
                }
            ],
        },
    }
    custom.create_namespaced_custom_object(*KUEUE_API, namespace, "workloads", workload)
    read = custom.get_namespaced_custom_object(*KUEUE_API, namespace, "workloads", "wl-probe")
    assert read["spec"]["podSets"][0]["count"] == 2
    watcher.join(25)
    assert "ADDED:wl-probe" in seen
