"""`webhook.enabled=false`: the controller, run as the chart runs it, takes a gang through its
whole life with no error in its log.

The chart is rendered with the pinned helm (`webhook.enabled=false`, the local cluster's
values); the controller is the `controller` command as the Deployment starts it: the
rendered settings file and the container's own arguments, plus only what a pod has and this
process has not (a kubeconfig, the Pulumi CLI's directory, its identity). The empty
ownership-key Secret the chart renders is created, as an install does. A gang is then
claimed, launched, made Ready, finished, kept warm and released by deleting its pool; the
log must show no ERROR and no traceback (before the settings carried `webhook.enabled`, the
controller started the webhook anyway, from a certificate directory nothing mounted).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set
from kubernetes import client as k8s

from devenv.controller_process import controller_env
from devenv.processes import Supervised, free_port
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.chart.conftest import Helm
from tests.integration.controller_harness import CLUSTER, REGION, GangEnv, eventually

POOL = "pool-no-webhook"


def _render(helm: Helm, env: GangEnv, namespace: str, state_dir: Path) -> Any:
    settings = env.settings
    return helm.render(
        {
            "webhook.enabled": False,
            "replicaCount": 1,
            "clusterName": CLUSTER,
            "defaults.region": REGION,
            "defaults.nodeRoleArn": settings.defaults.node_role_arn,
            "pulumi.backendUrl": settings.pulumi.backend_url,
            "pulumi.secretsProvider": settings.pulumi.secrets_provider,
            "pulumi.stateDir": str(state_dir),
            "aws.endpointUrl": settings.aws.endpoint_url,
            "metrics.port": free_port(),
            "health.port": free_port(),
            "kueue.localQueueNamespaces": [namespace],
            # What the harness's Jobs may choose (the chart's default allows GPU families).
            "allowedInstanceTypes": list(settings.allowed_instance_types),
        },
        namespace=namespace,
    )


def _start_as_the_deployment_does(
    rendered: Any, tmp_path: Path, control_plane: Any, pulumi_tool: Any
) -> Supervised:
    deployment = rendered.one("Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = list(container["args"])
    config = args[args.index("--config") + 1]
    local = tmp_path / "settings.yaml"
    local.write_text(rendered.settings()["data"][Path(config).name])
    args[args.index(config)] = str(local)
    argv = [sys.executable, "-m", "provisioner", *args]
    argv += [
        f"--kubeconfig={control_plane.info.kubeconfig}",
        f"--pulumi-root={pulumi_tool.binary.parent.parent}",
        f"--identity=no-webhook-{uuid.uuid4().hex[:6]}",
    ]
    return Supervised(
        "controller-no-webhook",
        argv,
        tmp_path / "controller.log",
        env=controller_env(passphrase="integration", region=REGION),
    )


def test_webhook_disabled_runs_a_gang_lifecycle_with_no_error_in_the_log(
    gang_env_factory: Any,
    tools: Any,
    control_plane: Any,
    pulumi_tool: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    env: GangEnv = gang_env_factory(start_controller=False)
    helm = Helm(tools["helm"].binary)
    rendered = _render(helm, env, namespace, tmp_path / "pulumi")
    assert "ValidatingWebhookConfiguration" not in rendered.kinds()
    # The chart's empty ownership-key Secret: the controller fills it on its first start.
    core = k8s.CoreV1Api(env.custom.api_client)
    (key_secret,) = [s for s in rendered.all("Secret") if s["metadata"]["name"].endswith("-key")]
    core.create_namespaced_secret(namespace, key_secret)

    controller = _start_as_the_deployment_does(rendered, tmp_path, control_plane, pulumi_tool)
    try:
        controller.wait_ready(
            lambda: "started for cluster" in controller.log_path.read_text(), 60, "started"
        )
        workload = env.submit("train", POOL, count=2)
        env.wait_phase(POOL, Phase.SATISFIED, timeout=180)
        env.wait_check(workload, c.CheckState.READY)
        assert len(env.live_instances(POOL)) == 2
        env.kueue.finish(env.namespace, workload)
        env.wait_phase(POOL, Phase.KEEP_WARM)
        env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, POOL)
        eventually(lambda: env.pool(POOL) is None, 180, "the pool released and gone")
        assert env.live_instances(POOL) == []
        assert controller.alive(), controller.log_tail()
    except AssertionError as failed:
        raise AssertionError(f"{failed}\ncontroller log:\n{controller.log_tail(60)}") from None
    finally:
        controller.stop()
    log = controller.log_path.read_text(errors="replace")
    assert "started for cluster" in log, log[-3000:]
    lines = log.splitlines()
    problems = [i for i, line in enumerate(lines) if "ERROR" in line or "Traceback" in line]
    first = problems[0] if problems else 0
    context = "\n".join(lines[max(first - 2, 0) : first + 30])
    assert problems == [], f"the controller's log shows an error:\n{context}"
    settings_file = yaml.safe_load(rendered.settings()["data"]["settings.yaml"])
    assert settings_file["webhook"] == {"enabled": False}
