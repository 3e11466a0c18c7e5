"""The chart's Kueue objects are the product's: `provisioner.api.kueue_objects` builds the
AdmissionCheck, ResourceFlavor, ClusterQueue and LocalQueues the bootstrap and the local
environment create; the chart's `templates/kueue.yaml` must render exactly those (apart
from the chart's own labels), with the defaults and with every name and quota changed."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api import kueue_objects as ko
from tests.chart.conftest import REQUIRED, Helm

_KINDS = ("GangClass", "AdmissionCheck", "ResourceFlavor", "ClusterQueue", "LocalQueue")


# A platform team's class: the shape decided, zones and keep-warm left to the Job.
GPU_CLASS = {
    "instanceType": "p5.48xlarge",
    "mode": "fleet",
    "efa": True,
    "placementGroup": "cluster",
    "capacityReservationId": "cr-0123456789abcdef0",
    "jobOverrides": ["availability-zones", "keep-warm-ttl"],
}


def test_no_class_name_makes_no_class_and_a_check_without_parameters(helm: Helm) -> None:
    rendered = _kueue_objects(helm, {"kueue.gangClassName": ""})
    assert [o for o in rendered if o["kind"] == "GangClass"] == []
    (check,) = [o for o in rendered if o["kind"] == "AdmissionCheck"]
    assert check == ko.admission_check()


def test_a_class_value_the_crd_would_refuse_is_refused_by_the_schema(helm: Helm) -> None:
    error = helm.render_error({"kueue.gangClass": {"jobOverrides": ["pool"]}})
    assert "/kueue/gangClass/jobOverrides/0" in error, error
    error = helm.render_error({"kueue.gangClass": {"instanceTypes": "p5.48xlarge"}})
    assert "instanceTypes" in error, error


def _kueue_objects(helm: Helm, values: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for obj in helm.render(values).objects:
        if obj["kind"] not in _KINDS:
            continue
        obj["metadata"].pop("labels", None)
        found.append(obj)
    return found


def _key(obj: dict[str, Any]) -> tuple[int, str, str]:
    meta = obj["metadata"]
    return (_KINDS.index(obj["kind"]), meta.get("namespace", ""), meta["name"])


def test_the_default_render_is_the_products_default_objects(helm: Helm) -> None:
    rendered = _kueue_objects(helm, {})
    # The chart's acceleratorQuota covers GPUs and EFA by default, as the bootstrap does.
    quotas = {
        "cpu": REQUIRED["kueue.clusterQueue.nominalQuota.cpu"],
        "memory": REQUIRED["kueue.clusterQueue.nominalQuota.memory"],
        **c.DEFAULT_ACCELERATOR_QUOTA,
    }
    assert sorted(rendered, key=_key) == sorted(ko.default_objects(("default",), quotas), key=_key)


@pytest.mark.parametrize(
    "quotas",
    [
        {"cpu": "512", "memory": "2Ti", "nvidia.com/gpu": "64"},
        {"vpc.amazonaws.com/efa": "32", "memory": "1Ti", "cpu": "96", "aws.amazon.com/neuron": "8"},
    ],
)
def test_renamed_objects_and_extra_quotas_match_the_builders(
    helm: Helm, quotas: dict[str, str]
) -> None:
    names = {
        "check_name": "gpu-check",
        "flavor_name": "gpu-flavor",
        "cluster_queue_name": "gpu-cq",
        "queue_name": "gpu-queue",
    }
    values: dict[str, Any] = {
        "kueue.admissionCheckName": names["check_name"],
        "kueue.resourceFlavorName": names["flavor_name"],
        "kueue.clusterQueueName": names["cluster_queue_name"],
        "kueue.queueName": names["queue_name"],
        "kueue.localQueueNamespaces": ["ml", "research"],
        "kueue.clusterQueue.namespaceSelector": {"matchLabels": {"team": "ml"}},
        # The whole map at once: resource names hold dots, which --set would split on.
        "kueue.clusterQueue.nominalQuota.cpu": None,
        "kueue.clusterQueue.nominalQuota.memory": None,
        "kueue.clusterQueue.nominalQuota": quotas,
        "kueue.gangClassName": "gpu",
        "kueue.gangClass": GPU_CLASS,
    }
    expected = ko.default_objects(
        ("ml", "research"),
        # nominalQuota wins over the default acceleratorQuota on a shared resource.
        {**c.DEFAULT_ACCELERATOR_QUOTA, **quotas},
        namespace_selector={"matchLabels": {"team": "ml"}},
        class_name="gpu",
        class_spec=GPU_CLASS,
        **names,
    )
    assert sorted(_kueue_objects(helm, values), key=_key) == sorted(expected, key=_key)


def test_the_builders_default_names_are_the_charts(helm: Helm) -> None:
    values = helm.render().objects
    assert {o["metadata"]["name"] for o in values if o["kind"] in _KINDS} == {
        ko.CLASS_NAME,
        ko.CHECK_NAME,
        ko.FLAVOR_NAME,
        ko.CLUSTER_QUEUE_NAME,
        ko.QUEUE_NAME,
    }
