"""What a platform team expects of a controller chart (issue #32, item 2): a values schema that
refuses unknown and mistyped keys, proxy and CA-bundle hooks (env, envFrom, extra volumes),
a priority class for the fail-closed webhook, zone spread, an optional NetworkPolicy and
PrometheusRule, error panels, and `webhook.enabled=false` reaching the controller."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import dynamic  # type: ignore[import-untyped]

from provisioner.controllers.metrics import ControllerMetrics
from tests.chart.conftest import CHART, KUBE_VERSION, REQUIRED, Helm, Rendered
from tests.chart.test_chart_settings import controller_settings
from tests.support.charted_metrics import metric_names

_SCHEMA_ERROR = "values don't meet the specifications of the schema"


def _set_args(values: dict[str, str]) -> list[str]:
    return [a for k, v in values.items() for a in ("--set-string", f"{k}={v}")]


def _pod(rendered: Rendered) -> dict[str, Any]:
    return dict(rendered.one("Deployment")["spec"]["template"]["spec"])


def _exported_metric_names() -> set[str]:
    """Every series name the controller's registry can export (a labelled metric with no
    child yet exports no sample, so the names come from each family's type)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    names: set[str] = set()
    for family in ControllerMetrics().registry.collect():
        names |= {family.name + s for s in suffixes.get(family.type, ("",))}
    return names


def _metric_names(expr: str) -> set[str]:
    return metric_names(expr)


# -- the values schema ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "where"),
    [
        ("image.respository", "/image"),  # the issue's example: nested misspelling
        ("webhook.enabeld", "/webhook"),
        ("replicaCont", ""),  # top level
        ("kueue.clusterQueue.nominalQuta.cpu", "/kueue/clusterQueue"),
    ],
)
def test_helm_template_refuses_a_misspelt_key_naming_it(helm: Helm, key: str, where: str) -> None:
    error = helm.render_error({key: "x"})
    assert _SCHEMA_ERROR in error
    misspelt = key.split(".")[-1] if where != "/kueue/clusterQueue" else "nominalQuta"
    assert f"at '{where}'" in error and f"'{misspelt}' not allowed" in error, error


def test_helm_lint_refuses_a_misspelt_key(helm: Helm) -> None:
    done = helm.run(
        "lint",
        "--strict",
        "--kube-version",
        KUBE_VERSION,
        str(CHART),
        *_set_args({**REQUIRED, "image.respository": "x"}),
    )
    assert done.returncode != 0
    assert "additional properties 'respository' not allowed" in done.stdout + done.stderr


def test_helm_install_refuses_a_misspelt_key_before_creating_anything(
    helm: Helm, control_plane: Any, namespace: str
) -> None:
    kubeconfig = str(control_plane.info.kubeconfig)
    release = "schema-refused"
    done = helm.run(
        "install",
        release,
        str(CHART),
        "--kubeconfig",
        kubeconfig,
        "--namespace",
        namespace,
        "--skip-crds",
        *_set_args({**REQUIRED, "image.respository": "x"}),
    )
    assert done.returncode != 0
    assert "additional properties 'respository' not allowed" in done.stderr
    listed = helm.run("list", "--kubeconfig", kubeconfig, "--namespace", namespace, "-q")
    assert listed.returncode == 0, listed.stderr
    assert release not in listed.stdout.split()


def test_the_crd_chart_refuses_a_misspelt_key_too(helm: Helm) -> None:
    crd_chart = str(CHART.parent / "atomic-gang-provisioner-crd")
    assert helm.run("template", "crds", crd_chart, "--set", "keep=false").returncode == 0
    done = helm.run("template", "crds", crd_chart, "--set", "kep=false")
    assert done.returncode != 0
    assert "additional properties 'kep' not allowed" in done.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # A string "false" is true to a template: the webhook would stay on.
        ({"webhook.enabled": "false"}, "at '/webhook/enabled': got string, want boolean"),
        ({"defaults.keepWarmTTL": "10 minutes"}, "/defaults/keepWarmTTL"),
        ({"replicaCount": "two"}, "/replicaCount"),
        ({"image.pullPolicy": "Sometimes"}, "/image/pullPolicy"),
        ({"topologySpread.whenUnsatisfiable": "Maybe"}, "/topologySpread/whenUnsatisfiable"),
    ],
)
def test_a_mistyped_value_is_refused_naming_it(
    helm: Helm, values: dict[str, str], message: str
) -> None:
    error = helm.render_error(values)
    assert _SCHEMA_ERROR in error and message in error, error


def test_the_schema_is_closed_at_every_level() -> None:
    """Every object the schema declares with properties refuses other keys, so a new value
    added to values.yaml without its schema entry fails every render (the default render
    validates values.yaml itself)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_objects: list[str] = []
    # Volumes and mounts are Kubernetes' own shapes, passed through; env entries are closed.
    passed_through = ("/properties/extraVolumes/items", "/properties/extraVolumeMounts/items")

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            closed = node.get("additionalProperties") is False
            if "properties" in node and not closed and path not in passed_through:
                open_objects.append(path)
            for key, child in node.items():
                # An `if` reads a key to choose a rule, and its `then`/`else` narrow the
                # keys of the object they sit in (closed itself): no object of their own.
                if key not in ("if", "then", "else"):
                    walk(child, f"{path}/{key}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{path}/{i}")

    walk(schema, "")
    assert open_objects == []


def test_the_schema_takes_every_option_this_chart_documents(helm: Helm) -> None:
    rendered = helm.render(
        {
            "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
            "envFrom": [{"configMapRef": {"name": "proxy"}}],
            "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
            "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/corp-ca"}],
            "podAnnotations": {"example.com/team": "ml"},
            "networkPolicy.enabled": True,
            "prometheusRule.enabled": True,
            "metrics.serviceMonitor.enabled": True,
            "stackOperations.workers": 4,
            "webhook.matchConditions": None,
            "kueue.clusterQueue.acceleratorQuota": {"nvidia.com/gpu": None},
            "replicaCount": "2",  # --set-string's digits are taken for a count
        }
    )
    assert {"NetworkPolicy", "PrometheusRule", "ServiceMonitor"} <= set(rendered.kinds())


# -- webhook.enabled=false ----------------------------------------------------------------------
def test_webhook_disabled_reaches_the_controller_and_leaves_no_webhook_object(
    helm: Helm, tmp_path: Path
) -> None:
    rendered = helm.render({"webhook.enabled": False})
    settings = controller_settings(rendered, tmp_path)
    assert settings.webhook.enabled is False
    assert settings.webhook.self_managed is None
    kinds = rendered.kinds()
    assert "ValidatingWebhookConfiguration" not in kinds
    (container,) = _pod(rendered)["containers"]
    assert "webhook" not in [p["name"] for p in container["ports"]]
    service_ports = [p["name"] for p in rendered.one("Service")["spec"]["ports"]]
    assert service_ports == ["metrics"]
    # On (the default), the section is the certificate rotator's and the webhook serves.
    assert controller_settings(helm.render(), tmp_path).webhook.enabled is True


# -- pod: priority, spread, env and volumes -------------------------------------------------------
def test_the_fail_closed_webhook_runs_at_system_cluster_critical_spread_over_zones(
    rendered: Rendered, helm: Helm
) -> None:
    pod = _pod(rendered)
    assert pod["priorityClassName"] == "system-cluster-critical"
    spread = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
    assert set(spread) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    selector = rendered.one("Deployment")["spec"]["selector"]["matchLabels"]
    for constraint in spread.values():
        assert constraint["labelSelector"]["matchLabels"] == selector
        assert constraint["maxSkew"] == 1
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"

    own = [{"topologyKey": "rack", "maxSkew": 2, "whenUnsatisfiable": "DoNotSchedule"}]
    replaced = _pod(helm.render({"topologySpreadConstraints": own, "priorityClassName": ""}))
    assert replaced["topologySpreadConstraints"] == own
    assert "priorityClassName" not in replaced
    off = _pod(helm.render({"topologySpread.enabled": False}))
    assert "topologySpreadConstraints" not in off


def test_env_and_extra_volumes_are_added_to_the_charts_own(rendered: Rendered, helm: Helm) -> None:
    (default,) = _pod(rendered)["containers"]
    extra = helm.render(
        {
            "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
            "envFrom": [{"secretRef": {"name": "proxy-credentials"}}],
            "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
            "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/corp-ca"}],
            "auth.mode": "static",
            "auth.static.secretName": "aws-keys",
        }
    )
    pod = _pod(extra)
    (container,) = pod["containers"]
    assert container["env"] == [
        *default["env"],
        {"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
    ]
    assert container["envFrom"] == [
        {"secretRef": {"name": "aws-keys"}},
        {"secretRef": {"name": "proxy-credentials"}},
    ]
    assert container["volumeMounts"][-1] == {"name": "corp-ca", "mountPath": "/etc/corp-ca"}
    assert container["volumeMounts"][:-1] == default["volumeMounts"]
    assert pod["volumes"][-1] == {"name": "corp-ca", "configMap": {"name": "corp-ca"}}
    # The restricted defaults are kept whatever is added.
    assert container["securityContext"] == default["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"] == _pod(rendered)["securityContext"]
    assert "envFrom" not in default


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"env": [{"name": "AWS_REGION", "value": "eu-west-1"}]},
            "env[0].name AWS_REGION is set by the chart itself",
        ),
        (
            {"extraVolumes": [{"name": "tmp", "emptyDir": {}}]},
            "extraVolumes[0].name tmp is one of the chart's own volumes",
        ),
        (
            {"extraVolumeMounts": [{"name": "x", "mountPath": "/etc/atomic-gang/ca"}]},
            "extraVolumeMounts[0].mountPath /etc/atomic-gang/ca is at or under /etc/atomic-gang",
        ),
    ],
)
def test_extras_that_would_replace_the_charts_own_are_refused(
    helm: Helm, values: dict[str, Any], message: str
) -> None:
    assert message in helm.render_error(values)


# -- NetworkPolicy ----------------------------------------------------------------------------
def test_network_policy_admits_only_the_webhook_and_metrics_ports(
    rendered: Rendered, helm: Helm
) -> None:
    assert "NetworkPolicy" not in rendered.kinds()
    on = helm.render({"networkPolicy.enabled": True})
    policy = on.one("NetworkPolicy")["spec"]
    assert (
        policy["podSelector"]["matchLabels"]
        == on.one("Deployment")["spec"]["selector"]["matchLabels"]
    )
    assert policy["policyTypes"] == ["Ingress"], "egress stays open: AWS and the API server"
    ports = [p["port"] for rule in policy["ingress"] for p in rule["ports"]]
    assert ports == ["webhook", "metrics"]
    (container,) = _pod(on)["containers"]
    assert set(ports) <= {p["name"] for p in container["ports"]}

    scraper = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    dns = [{"ports": [{"port": 53, "protocol": "UDP"}]}]
    narrowed = helm.render(
        {
            "networkPolicy.enabled": True,
            "networkPolicy.metricsFrom": scraper,
            "networkPolicy.egress": dns,
            "webhook.enabled": False,
        }
    ).one("NetworkPolicy")["spec"]
    assert narrowed["policyTypes"] == ["Ingress", "Egress"]
    assert narrowed["egress"] == dns
    assert narrowed["ingress"] == [
        {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": scraper}
    ]


def test_new_objects_pass_apiserver_validation(
    helm: Helm, kube_api: Any, kueue_crds: list[str], namespace: str
) -> None:
    rendered = helm.render(
        {
            "networkPolicy.enabled": True,
            "networkPolicy.metricsFrom": [{"podSelector": {}}],
            "env": [{"name": "NO_PROXY", "value": ".svc"}],
            "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
            "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/corp-ca"}],
            "kueue.localQueueNamespaces": [namespace],
        },
        namespace=namespace,
    )
    client = dynamic.DynamicClient(kube_api)
    for kind in ("Deployment", "NetworkPolicy"):
        obj = rendered.one(kind)
        api = client.resources.get(api_version=obj["apiVersion"], kind=kind)
        api.server_side_apply(
            body=obj,
            namespace=namespace,
            field_manager="chart-operability-test",
            force_conflicts=True,
            dry_run="All",
        )


# -- PrometheusRule and the dashboard ----------------------------------------------------------
def test_prometheus_rule_alerts_on_metrics_the_controller_exports(
    rendered: Rendered, helm: Helm
) -> None:
    assert "PrometheusRule" not in rendered.kinds()
    on = helm.render({"prometheusRule.enabled": True, "prometheusRule.labels": {"release": "kps"}})
    rule = on.one("PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {
        "AtomicGangStrandedNodeSeconds",
        "AtomicGangShortfallStreak",
        "AtomicGangStackOperationsFailing",
        "AtomicGangReconcileErrors",
        "AtomicGangNoLeader",
        "AtomicGangReaperTerminated",
    }
    exported = _exported_metric_names()
    job = f'job="{on.one("Deployment")["metadata"]["name"]}"'
    for name, alert in alerts.items():
        named = _metric_names(alert["expr"])
        assert named, name
        assert named <= exported, f"{name}: {named - exported} is not exported"
        assert job in alert["expr"], f"{name} must select this installation's series"
        assert alert["labels"]["severity"] in ("warning", "critical")
    assert (
        "atomic_gang_node_seconds_stranded_total" in alerts["AtomicGangStrandedNodeSeconds"]["expr"]
    )
    # The no-leader alert reads the leader gauge every replica exports, not a side effect.
    no_leader = alerts["AtomicGangNoLeader"]
    assert _metric_names(no_leader["expr"]) == {"atomic_gang_leader"}
    assert "max(atomic_gang_leader" in no_leader["expr"] and "absent(" in no_leader["expr"]
    assert no_leader["for"]
    assert (
        "controller_runtime_reconcile_errors_total" in alerts["AtomicGangReconcileErrors"]["expr"]
    )
    assert ">= 5" in alerts["AtomicGangShortfallStreak"]["expr"]
    streak = helm.render(
        {
            "prometheusRule.enabled": True,
            "prometheusRule.shortfallStreak.shortfalls": 12,
            "prometheusRule.shortfallStreak.window": "1h",
            "prometheusRule.selector": 'namespace="gangs"',
        }
    ).one("PrometheusRule")
    expr = next(
        r["expr"]
        for g in streak["spec"]["groups"]
        for r in g["rules"]
        if r["alert"] == "AtomicGangShortfallStreak"
    )
    assert ">= 12" in expr and "[1h]" in expr and 'namespace="gangs"' in expr


def test_dashboard_has_error_panels_on_exported_metrics(rendered: Rendered) -> None:
    name = rendered.one("Deployment")["metadata"]["name"]
    dashboard = json.loads(
        rendered.one("ConfigMap", f"{name}-dashboard")["data"]["atomic-gang-provisioner.json"]
    )
    exported = _exported_metric_names()
    errors = [p for p in dashboard["panels"] if p["title"].startswith("Errors:")]
    queried = " ".join(t["expr"] for p in errors for t in p["targets"])
    for metric in (
        "controller_runtime_reconcile_errors_total",
        "atomic_gang_stack_operation_seconds_count",
        "atomic_gang_acquisitions_total",
        "atomic_gang_reaper_sweeps_skipped_total",
    ):
        assert metric in queried
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            named = _metric_names(target["expr"])
            assert named and named <= exported, f"{panel['title']}: {named - exported}"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
