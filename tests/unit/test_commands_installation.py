"""Finding the installed controller's settings ConfigMap, on a fake reader; and the pure
rules doctor's installation checks read (Kueue's waitForPodsReady, the state URLs)."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.cloud.state_access import kms_key_of, s3_backend_of
from provisioner.commands.doctor_install import wait_for_pods_ready
from provisioner.commands.installation import (
    CHART_NAMESPACE,
    DiscoveryError,
    choose_settings_configmap,
    find_installation,
)
from tests.support.fake_kube import FakeKube

ROLE = "arn:aws:iam::123456789012:role/nodes"
SETTINGS = (
    f"clusterName: demo\ndefaults: {{region: us-east-1, nodeRoleArn: '{ROLE}'}}\n"
    "pulumi: {backendUrl: 's3://atomic-gang-state?region=us-east-1'}\n"
)
PART_OF = {"app.kubernetes.io/part-of": "atomic-gang-provisioner"}


def _obj(kind: str, namespace: str, name: str, release: str = "r", **extra: Any) -> dict[str, Any]:
    labels = {**PART_OF, "app.kubernetes.io/instance": release}
    return {
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        **extra,
    }


def _settings_cm(namespace: str, name: str = "r-provisioner-settings", **kw: Any) -> dict[str, Any]:
    return _obj("ConfigMap", namespace, name, data={"settings.yaml": SETTINGS}, **kw)


def _dashboard(namespace: str) -> dict[str, Any]:
    return _obj("ConfigMap", namespace, "r-provisioner-dashboard", data={"x.json": "{}"})


def test_the_one_in_the_charts_namespace_is_used_and_named() -> None:
    kube = FakeKube(_settings_cm(CHART_NAMESPACE), _dashboard(CHART_NAMESPACE))
    inst = find_installation(kube)
    assert inst.source == f"ConfigMap {CHART_NAMESPACE}/r-provisioner-settings"
    assert inst.settings.cluster_name == "demo"
    assert inst.settings.leader_election.lease_namespace == CHART_NAMESPACE
    assert inst.settings.leader_election.lease_name == "r-provisioner"
    assert inst.service_account is None


def test_other_namespaces_are_searched_when_no_namespace_was_given() -> None:
    kube = FakeKube(_settings_cm("platform"))
    assert find_installation(kube).namespace == "platform"


def test_a_given_namespace_is_the_only_one_searched() -> None:
    kube = FakeKube(_settings_cm("platform"))
    with pytest.raises(DiscoveryError, match=r"namespace elsewhere.*--controller-namespace"):
        find_installation(kube, namespace="elsewhere")


def test_none_anywhere_names_the_flags() -> None:
    with pytest.raises(DiscoveryError) as err:
        find_installation(FakeKube(_dashboard(CHART_NAMESPACE)))
    for flag in ("--controller-namespace", "--settings-configmap", "--config"):
        assert flag in str(err.value)


def test_several_are_listed_and_the_flag_named() -> None:
    kube = FakeKube(_settings_cm("a"), _settings_cm("b", release="other"))
    with pytest.raises(DiscoveryError, match=r"2 settings ConfigMaps.*a/r-.*b/r-.*--settings"):
        find_installation(kube)


def test_an_explicit_configmap_wins() -> None:
    kube = FakeKube(_settings_cm("a"), _settings_cm("b", name="mine"))
    assert find_installation(kube, configmap="b/mine").source == "ConfigMap b/mine"
    with pytest.raises(DiscoveryError, match="does not exist"):
        find_installation(kube, configmap="b/gone")


def test_the_deployments_flags_and_service_account_win() -> None:
    args = ["controller", "--config", "/etc/x", "--leader-election.lease-name=custom"]
    deployment = _obj(
        "Deployment",
        "ns",
        "r-provisioner",
        spec={
            "template": {
                "spec": {
                    "serviceAccountName": "from-deployment",
                    "containers": [{"name": "controller", "args": args}],
                }
            }
        },
    )
    kube = FakeKube(_settings_cm("ns"), deployment, _obj("ServiceAccount", "ns", "labelled"))
    inst = find_installation(kube, namespace="ns")
    assert inst.settings.leader_election.lease_name == "custom"
    assert inst.service_account == "from-deployment"
    assert find_installation(kube, namespace="ns", service_account="flag").service_account == (
        "flag"
    )


def test_the_releases_labelled_service_account_without_a_deployment() -> None:
    kube = FakeKube(_settings_cm("ns"), _obj("ServiceAccount", "ns", "ctrl"))
    assert find_installation(kube, namespace="ns").service_account == "ctrl"


def test_invalid_settings_name_the_configmap() -> None:
    bad = _obj("ConfigMap", "ns", "r-settings", data={"settings.yaml": "clusterName: demo\n"})
    with pytest.raises(DiscoveryError, match="ConfigMap ns/r-settings"):
        find_installation(FakeKube(bad), namespace="ns")


def test_choose_ignores_chart_configmaps_without_settings() -> None:
    assert choose_settings_configmap([_dashboard("a"), _settings_cm("a")], "x")["data"]


@pytest.mark.parametrize(
    ("config", "args", "on"),
    [
        ({"apiVersion": "config.kueue.x-k8s.io/v1beta2"}, [], True),
        ({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "waitForPodsReady": {}}, [], True),
        (
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "featureGates": {"DisableWaitForPodsReady": True},
            },
            [],
            False,
        ),
        (
            {"apiVersion": "config.kueue.x-k8s.io/v1beta2"},
            ["--feature-gates=A=true,DisableWaitForPodsReady=true"],
            False,
        ),
        ({"apiVersion": "config.kueue.x-k8s.io/v1beta1"}, [], False),
        (
            {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "waitForPodsReady": {"enable": True}},
            [],
            True,
        ),
    ],
)
def test_wait_for_pods_ready(config: dict[str, Any], args: list[str], on: bool) -> None:
    assert wait_for_pods_ready(config, args)[0] is on


def test_state_urls() -> None:
    backend = s3_backend_of("s3://bucket/team/a?region=eu-west-1")
    assert (backend.bucket, backend.prefix, backend.region) == ("bucket", "team/a/", "eu-west-1")
    assert s3_backend_of("s3://bucket").prefix == ""
    assert kms_key_of("awskms://alias/state?region=us-east-1") == ("alias/state", "us-east-1")
    arn = "arn:aws:kms:eu-west-1:123456789012:key/abcd"
    assert kms_key_of(f"awskms:///{arn}") == (arn, "eu-west-1")
