"""The controller image, run as the chart runs it, against the embedded default.

`image` builds it once per session with `image/build.sh` (what `make image` runs; a warm
build reuses every layer). `ImageInstall` renders the chart with this environment's values
(cluster, region, node role, emulator endpoint, free ports on the host network, short
backoffs) and turns its Deployment into a `podman run`: the pod's user and group, a
read-only root filesystem with nothing else writable, no capabilities, no privilege
escalation, the settings ConfigMap and the webhook's TLS Secret as read-only bind mounts,
the emptyDirs as tmpfs, the container's env and args (plus `--kubeconfig`, which in a pod
is the service account). Anything the chart changes, this run follows.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set
from kubernetes import client as k8s  # type: ignore[import-untyped]

from devenv.environment import LocalEnvironment
from devenv.processes import free_port
from devenv.state_backend import seed_state_backend
from tests.chart.conftest import NAMESPACE as RELEASE_NAMESPACE
from tests.chart.conftest import Helm

REPO = Path(__file__).resolve().parents[2]
PODMAN = REPO / "image" / "podman"
IMAGE = os.environ.get("ATOMIC_GANG_IMAGE", "localhost/atomic-gang-provisioner:dev")
KUBECONFIG_IN_CONTAINER = "/run/atomic-gang-test/kubeconfig"
PASSPHRASE = "image-test"


def podman(*args: str, timeout: float = 120, check: bool = True) -> str:
    done = subprocess.run(
        [str(PODMAN), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args[:3])} failed: {done.stderr[-3000:]}")
    return done.stdout


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(__file__).parent in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.image)


@pytest.fixture(scope="session")
def image() -> str:
    """The image, built (or found up to date) by the same script as `make image`."""
    started = time.monotonic()
    done = subprocess.run(
        [str(REPO / "image" / "build.sh")],
        env={**os.environ, "PYTHON": sys.executable, "ATOMIC_GANG_IMAGE": IMAGE},
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert done.returncode == 0, f"image/build.sh failed:\n{done.stderr[-5000:]}"
    print(f"\n[image] {IMAGE} ready in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return IMAGE


@dataclass
class ImageInstall:
    """One controller container, configured by the chart, on the host network."""

    env: LocalEnvironment
    image: str
    work: Path
    helm: Helm
    name: str = field(default_factory=lambda: f"atomic-gang-it-{uuid.uuid4().hex[:8]}")
    ports: dict[str, int] = field(default_factory=dict)
    started: bool = False

    def values(self) -> dict[str, Any]:
        env = self.env
        assert env.identity is not None and env.emulator is not None
        self.ports = {"webhook": free_port(), "metrics": free_port(), "health": free_port()}
        # The stacks live where the embedded default keeps them: the emulator's S3 and KMS.
        state = seed_state_backend(env.emulator.endpoint_url, env.region)
        return {
            "pulumi.backendUrl": state.backend_url,
            "pulumi.secretsProvider": state.secrets_provider,
            "clusterName": env.cluster_name,
            "defaults.region": env.region,
            "defaults.nodeRoleArn": env.identity.role_arn,
            "defaults.keepWarmTTL": "5s",
            "aws.endpointUrl": env.emulator.endpoint_url,
            "auth.mode": "static",
            "auth.static.secretName": "aws-keys",
            "replicaCount": 1,
            # The chart's default allowlist is the GPU families; this world's gangs are m5.
            "allowedInstanceTypes": ["m5.*"],
            "reapIntervalSeconds": 5,
            "joinDeadlineSeconds": 60,
            "retryBackoff.initial": "500ms",
            "retryBackoff.max": "4s",
            "webhook.certMode": "provided",
            "webhook.tls.secretName": "webhook-tls",
            "webhook.caBundle": base64.b64encode(self.ca_pem).decode(),
            "webhook.port": self.ports["webhook"],
            "metrics.port": self.ports["metrics"],
            "health.port": self.ports["health"],
        }

    @property
    def ca_pem(self) -> bytes:
        assert self.env.control_plane is not None
        return bytes(self.env.control_plane.ca.cert_pem)

    def render(self) -> Any:
        return self.helm.render(self.values())

    def start(self) -> dict[str, Any]:
        rendered = self.render()
        deployment = rendered.one("Deployment")
        settings = rendered.one("ConfigMap", f"{deployment['metadata']['name']}-settings")
        webhook = rendered.one("ValidatingWebhookConfiguration")
        dashboard = rendered.one("ConfigMap", f"{deployment['metadata']['name']}-dashboard")
        self.apply_secrets(rendered.all("Secret"))
        podman("run", "--detach", *self.run_args(deployment, settings), timeout=300)
        self.started = True
        self.wait_ready()
        return {"deployment": deployment, "webhook": webhook, "dashboard": dashboard}

    def apply_secrets(self, secrets: list[dict[str, Any]]) -> None:
        """Create the Secrets the chart renders (the self-managed ownership key), as `helm
        install` would; one left by an earlier install is kept, as the chart keeps it."""
        assert self.env.control_plane is not None
        core = k8s.CoreV1Api(self.env.control_plane.api_client())
        for secret in secrets:
            try:
                core.create_namespaced_secret(secret["metadata"]["namespace"], secret)
            except k8s.ApiException as err:
                if err.status != 409:
                    raise

    def run_args(self, deployment: dict[str, Any], settings: dict[str, Any]) -> list[str]:
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        pod_sc, sc = pod["securityContext"], container["securityContext"]
        assert pod_sc["runAsNonRoot"] and sc["runAsNonRoot"]
        args = ["--name", self.name, "--user", f"{pod_sc['runAsUser']}:{pod_sc['runAsGroup']}"]
        if sc.get("readOnlyRootFilesystem"):
            # Only the chart's volumes are writable: no tmpfs of podman's own.
            args += ["--read-only", "--read-only-tmpfs=false"]
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        for cap in sc.get("capabilities", {}).get("drop", []):
            args += ["--cap-drop", cap.lower()]
        volumes = {v["name"]: v for v in pod["volumes"]}
        for mount in container["volumeMounts"]:
            args += self._mount(volumes[mount["name"]], mount, settings)
        kube_dir = self._dir("kube", {"kubeconfig": self._kubeconfig()})
        args += ["--volume", f"{kube_dir}:{Path(KUBECONFIG_IN_CONTAINER).parent}:ro"]
        for var in container["env"]:
            args += ["--env", f"{var['name']}={self._env_value(var)}"]
        for source in container.get("envFrom", []):
            assert source["secretRef"]["name"] == "aws-keys"
            args += ["--env", "AWS_ACCESS_KEY_ID=local", "--env", "AWS_SECRET_ACCESS_KEY=local"]
        args.append(self.image)
        args += container["args"]
        args += ["--kubeconfig", KUBECONFIG_IN_CONTAINER]
        return args

    def _mount(
        self,
        volume: dict[str, Any],
        mount: dict[str, Any],
        settings: dict[str, Any],
    ) -> list[str]:
        path = mount["mountPath"]
        mode = ":ro" if mount.get("readOnly") else ""
        if "emptyDir" in volume:
            # The kubelet makes an emptyDir writable by the pod's user. podman gives a tmpfs
            # over a directory the image has that directory's mode; U=true chowns it to the
            # container's user.
            return ["--mount", f"type=tmpfs,destination={path},tmpfs-mode=1777,U=true"]
        if "configMap" in volume:
            return ["--volume", f"{self._dir('settings', settings['data'])}:{path}{mode}"]
        if "secret" in volume:
            assert self.env.control_plane is not None
            pair = self.env.control_plane.ca.serving("127.0.0.1")
            tls = self.work / "tls"
            tls.mkdir(exist_ok=True)
            cert, key = pair.write(tls, "tls.crt", "tls.key")
            files = {"tls.crt": cert.read_text(), "tls.key": key.read_text()}
            return ["--volume", f"{self._dir('webhook-tls', files)}:{path}{mode}"]
        raise AssertionError(f"a volume the test does not know how to mount: {volume}")

    def _dir(self, name: str, files: dict[str, str]) -> Path:
        # World-readable: the container's user is not the owner of these files.
        directory = self.work / name
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)
        for file_name, text in files.items():
            (directory / file_name).write_text(text)
            (directory / file_name).chmod(0o644)
        return directory

    def _kubeconfig(self) -> str:
        assert self.env.control_plane is not None
        return self.env.kubeconfig_path().read_text()

    def _env_value(self, var: dict[str, Any]) -> str:
        if "value" in var:
            return str(var["value"])
        source = var["valueFrom"]
        if "fieldRef" in source:
            return {"metadata.name": self.name, "metadata.namespace": RELEASE_NAMESPACE}[
                source["fieldRef"]["fieldPath"]
            ]
        if "secretKeyRef" in source:
            return PASSPHRASE
        raise AssertionError(f"an env source the test does not know: {var}")

    def wait_ready(self, timeout: float = 120) -> None:
        url = f"http://127.0.0.1:{self.ports['health']}/readyz"
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            state = podman("inspect", "--format", "{{.State.Status}}", self.name, check=False)
            if state.strip() not in ("running", "created", "configured"):
                raise AssertionError(f"the controller container is {state!r}:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the container never became ready:\n{self.logs()[-5000:]}")
            time.sleep(0.5)

    def logs(self) -> str:
        done = subprocess.run(
            [str(PODMAN), "logs", self.name], capture_output=True, text=True, timeout=60
        )
        return done.stdout + done.stderr

    def json_logs(self) -> list[dict[str, Any]]:
        lines = []
        for line in self.logs().splitlines():
            if line.startswith("{"):
                lines.append(json.loads(line))
        return lines

    def stop(self) -> None:
        if self.started:
            podman("stop", "--time", "10", self.name, check=False, timeout=60)
            (self.work / "container.log").write_text(self.logs())
            podman("rm", "--force", self.name, check=False, timeout=120)


@pytest.fixture(scope="module")
def image_env(
    control_plane: Any,
    kueue: Any,
    emulator_process: Any,
    pulumi_tool: Any,
    kube_api: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalEnvironment]:
    """The embedded default without its in-process controller: the container is it."""
    core = k8s.CoreV1Api(kube_api)
    namespace = f"img-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace}})
    for name in (RELEASE_NAMESPACE,):
        try:
            core.create_namespace({"metadata": {"name": name}})
        except k8s.ApiException as err:
            if err.status != 409:
                raise
    emulator_process.client.reset()
    env = LocalEnvironment(
        work_dir=tmp_path_factory.mktemp("image-env"),
        queue_namespaces=(namespace,),
        with_controller=False,
        join_delay=0.5,
        job_run_seconds=2.0,
    )
    env.control_plane, env.kueue, env.emulator = control_plane, kueue, emulator_process
    env.start_gang_parts(pulumi_tool)
    yield env
    env.stop()
    core.delete_namespace(namespace)


@pytest.fixture(scope="module")
def install(
    image: str, image_env: LocalEnvironment, tools: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ImageInstall, dict[str, Any]]]:
    work = tmp_path_factory.mktemp("image-install")
    work.chmod(0o755)
    running = ImageInstall(image_env, image, work, Helm(tools["helm"].binary))
    try:
        rendered = running.start()
        yield running, rendered
    finally:
        running.stop()


def write_yaml(path: Path, doc: Any) -> None:
    path.write_text(yaml.safe_dump(doc))
