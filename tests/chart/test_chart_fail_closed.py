"""Renders that must fail, and fail saying which value to set: the chart installs nothing
half-configured."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.conftest import Helm

CASES: list[tuple[str, dict[str, Any], str]] = [
    # No public image exists: an install without a repository would sit in ImagePullBackOff.
    ("no image repository", {"image.repository": None}, "image.repository is required"),
    ("no cluster", {"clusterName": None}, "clusterName is required"),
    ("no region", {"defaults.region": None}, "defaults.region is required"),
    (
        "no cpu quota",
        {"kueue.clusterQueue.nominalQuota.cpu": None},
        "kueue.clusterQueue.nominalQuota.cpu is required",
    ),
    (
        "no memory quota",
        {"kueue.clusterQueue.nominalQuota.memory": None},
        "kueue.clusterQueue.nominalQuota.memory is required",
    ),
    (
        "zero cpu quota",
        {"kueue.clusterQueue.nominalQuota.cpu": "0"},
        "kueue.clusterQueue.nominalQuota.cpu is 0: it must be non-zero",
    ),
    (
        "zero memory quota",
        {"kueue.clusterQueue.nominalQuota.memory": "0Gi"},
        "kueue.clusterQueue.nominalQuota.memory is 0Gi: it must be non-zero",
    ),
    (
        "zero quota as a number",
        {"kueue.clusterQueue.nominalQuota.cpu": 0},
        "kueue.clusterQueue.nominalQuota.cpu is 0: it must be non-zero",
    ),
    (
        "job watching",
        {"integrationMode": "jobwatch"},
        "at '/integrationMode': value must be 'admissioncheck'",
    ),
    (
        "no node role at all",
        {"defaults.nodeRoleArn": None},
        "defaults.nodeRoleArn is required unless allowedNodeRoleArns lists",
    ),
    (
        "default role outside the allowlist",
        {"allowedNodeRoleArns": ["arn:aws:iam::123456789012:role/other"]},
        "is not in allowedNodeRoleArns",
    ),
    (
        "two leaders",
        {"leaderElection.enabled": False},
        "leaderElection.enabled=false with replicaCount=2",
    ),
    ("no stack workers", {"stackOperations.workers": 0}, "at '/stackOperations/workers'"),
    (
        "unknown provider host",
        {"stackOperations.providerHost": "inProcess"},
        "at '/stackOperations/providerHost': value must be one of",
    ),
    ("node bootstrap hook", {"nodeBootstrap.enabled": True}, "nodeBootstrap.enabled=true is not"),
    (
        "bad mode",
        {"defaults.mode": "spot"},
        "at '/defaults/mode': value must be one of 'runinstances', 'fleet'",
    ),
    ("bad auth", {"auth.mode": "keys"}, 'auth.mode "keys" is not supported'),
    ("irsa without a role", {"auth.mode": "irsa"}, "serviceAccount.roleArn is required"),
    ("static without keys", {"auth.mode": "static"}, "auth.static.secretName is required"),
    ("bad cert mode", {"webhook.certMode": "acme"}, 'webhook.certMode "acme" is not supported'),
    (
        "provided without a secret",
        {"webhook.certMode": "provided", "webhook.caBundle": "Q0E="},
        "webhook.tls.secretName is required",
    ),
    (
        "provided without a CA",
        {"webhook.certMode": "provided", "webhook.tls.secretName": "my-tls"},
        "webhook.caBundle is required",
    ),
    (
        "bad failure policy",
        {"webhook.failurePolicy": "Retry"},
        'webhook.failurePolicy "Retry" is not a failure policy',
    ),
    (
        "bad pod failure policy",
        {"webhook.pods.failurePolicy": "Retry"},
        'webhook.pods.failurePolicy "Retry" is not a failure policy',
    ),
    (
        "no local queue namespaces",
        {"kueue.localQueueNamespaces": []},
        "kueue.localQueueNamespaces is empty",
    ),
]


@pytest.mark.parametrize(
    ("values", "message"), [(v, m) for _, v, m in CASES], ids=[i for i, _, _ in CASES]
)
def test_render_fails_naming_the_value(helm: Helm, values: dict[str, Any], message: str) -> None:
    assert message in helm.render_error(values)


def test_nothing_renders_without_values(helm: Helm) -> None:
    assert "clusterName is required" in helm.render_error(base=False)


def test_quotas_are_not_required_when_the_chart_makes_no_cluster_queue(helm: Helm) -> None:
    rendered = helm.render(
        {
            "kueue.clusterQueue.nominalQuota.cpu": None,
            "kueue.clusterQueue.nominalQuota.memory": None,
            "kueue.create.clusterQueue": False,
        }
    )
    assert rendered.all("ClusterQueue") == []
