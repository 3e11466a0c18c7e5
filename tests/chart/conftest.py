"""Chart tests: render `charts/atomic-gang-provisioner` with the pinned helm and read the
objects back. Every test here runs the real helm binary (a build from the toolchain), so
they are marked integration; they start no server and take well under a second each.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set

CHART = Path(__file__).resolve().parents[2] / "charts" / "atomic-gang-provisioner"
NAMESPACE = "atomic-gang-system"
RELEASE = "atomic-gang"
KUBE_VERSION = "1.36.3"
NODE_ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"

STATE_BACKEND = "s3://atomic-gang-state?region=us-east-1"
STATE_SECRETS = "awskms://alias/atomic-gang-state?region=us-east-1"

# The values the reference's install command sets; with these a render must succeed.
REQUIRED: dict[str, str] = {
    "image.repository": "123456789012.dkr.ecr.us-east-1.amazonaws.com/atomic-gang-provisioner",
    "clusterName": "my-eks-cluster",
    "defaults.region": "us-east-1",
    "defaults.nodeRoleArn": NODE_ROLE,
    "kueue.clusterQueue.nominalQuota.cpu": "256",
    "kueue.clusterQueue.nominalQuota.memory": "1Ti",
    # What the bootstrap makes for the stacks: a durable backend is required.
    "pulumi.backendUrl": STATE_BACKEND,
    "pulumi.secretsProvider": STATE_SECRETS,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if CHART.parent.parent / "tests" / "chart" in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


class Rendered:
    """The objects of one render, found by kind and name."""

    def __init__(self, documents: Iterable[dict[str, Any]]) -> None:
        self.objects = [d for d in documents if d]

    def kinds(self) -> list[str]:
        return sorted(o["kind"] for o in self.objects)

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def settings(self) -> dict[str, Any]:
        """The controller's settings ConfigMap (the dashboard is a ConfigMap too)."""
        name = self.one("Deployment")["metadata"]["name"]
        return self.one("ConfigMap", f"{name}-settings")

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.all(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
        return found[0]


class Helm:
    def __init__(self, binary: Path) -> None:
        self.binary = binary

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, timeout=120, check=False
        )

    def _args(
        self, values: Mapping[str, Any], extra: Iterable[str], namespace: str = NAMESPACE
    ) -> list[str]:
        args = ["template", RELEASE, str(CHART), "--namespace", namespace]
        args += ["--kube-version", KUBE_VERSION, "--include-crds", *extra]
        for key, value in values.items():
            if value is None:
                continue
            if isinstance(value, str):
                args += ["--set-string", f"{key}={value}"]
            else:
                args += ["--set-json", f"{key}={json.dumps(value)}"]
        return args

    def render(
        self,
        values: Mapping[str, Any] | None = None,
        *extra: str,
        base: bool = True,
        namespace: str = NAMESPACE,
    ) -> Rendered:
        """Render with REQUIRED plus `values` (None removes a key); fail on any error."""
        merged = {**(REQUIRED if base else {}), **(values or {})}
        done = self.run(*self._args(merged, extra, namespace))
        assert done.returncode == 0, done.stderr
        return Rendered(yaml.safe_load_all(done.stdout))

    def render_error(self, values: Mapping[str, Any] | None = None, *, base: bool = True) -> str:
        """Render expecting failure; return helm's error output."""
        merged = {**(REQUIRED if base else {}), **(values or {})}
        done = self.run(*self._args(merged, ()))
        assert done.returncode != 0, f"the render should have failed:\n{done.stdout[:2000]}"
        return done.stderr


@pytest.fixture(scope="session")
def helm(tools: Any) -> Helm:
    return Helm(tools["helm"].binary)


@pytest.fixture(scope="session")
def rendered(helm: Helm) -> Rendered:
    """The render with only the required values: every default in force."""
    return helm.render()


Render = Callable[..., Rendered]
