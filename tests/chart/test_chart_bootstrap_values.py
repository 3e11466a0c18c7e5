"""The values the bootstrap program hands the chart render: the Helm release `pulumi up`
makes would install."""

from __future__ import annotations

import json
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set

from infra.config import BootstrapConfig
from infra.release import CHART_PATH, chart_values
from tests.chart.conftest import CHART, KUBE_VERSION, NAMESPACE, Helm, Rendered

NODE_ROLE = "arn:aws:iam::123456789012:role/atomic-gang-node-demo"
CFG = BootstrapConfig(
    cluster_name="demo",
    region="us-east-1",
    cpu_quota="8",
    memory_quota="32Gi",
    image_repository="registry.example/atomic-gang-provisioner",
)


def test_the_bootstrap_installs_this_chart() -> None:
    assert CHART_PATH == CHART


def test_the_bootstrap_values_render(helm: Helm, tmp_path: Path) -> None:
    values = tmp_path / "values.json"
    backend = "s3://atomic-gang-state-demo-123456789012-us-east-1?region=us-east-1"
    secrets = f"awskms://{CFG.state_key_alias}?region=us-east-1"
    values.write_text(json.dumps(chart_values(CFG, NODE_ROLE, [NODE_ROLE], backend, secrets)))
    done = helm.run(
        "template",
        CFG.release_name,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
        "--values",
        str(values),
    )
    assert done.returncode == 0, done.stderr
    rendered = Rendered(yaml.safe_load_all(done.stdout))
    # The Kueue objects come from the bootstrap, not from the chart.
    for kind in ("AdmissionCheck", "ResourceFlavor", "ClusterQueue", "LocalQueue"):
        assert rendered.all(kind) == []
    account = rendered.one("ServiceAccount")
    assert account["metadata"]["name"] == CFG.service_account
    assert "annotations" not in account["metadata"]  # Pod Identity needs none
    settings = yaml.safe_load(rendered.settings()["data"]["settings.yaml"])
    assert settings["defaults"]["nodeRoleArn"] == NODE_ROLE
    assert settings["allowedNodeRoleArns"] == [NODE_ROLE]
    # Durable stacks with KMS secrets: no passphrase, no Secret, nothing to fail the render.
    assert settings["pulumi"]["backendUrl"] == backend
    assert settings["pulumi"]["secretsProvider"] == secrets
    # The only Secrets are the ownership key's and the webhook certificate's, rendered empty
    # for the controller to fill (the bootstrap installs with webhook.certMode=selfSigned,
    # needing no cert-manager, and no ownership.keySecret).
    fullname = rendered.one("Deployment")["metadata"]["name"]
    assert [(x["metadata"]["name"], x.get("data")) for x in rendered.all("Secret")] == [
        (f"{fullname}-ownership-key", None),
        (f"{fullname}-webhook-certs", None),
    ]
