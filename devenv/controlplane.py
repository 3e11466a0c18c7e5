"""A real local Kubernetes control plane: etcd and kube-apiserver on 127.0.0.1.

Used by the pytest session fixtures, by `atomic-gang dev up` and by the demo. It generates a
CA, serving and client certificates and service-account keys, starts etcd and the apiserver
on free ports, writes an admin kubeconfig, and installs CRDs (ours and Kueue's). There is no
kubelet, scheduler or controller-manager: nodes come from the node simulator and nothing
here runs pods.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import time
import urllib.request
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from devenv import pki
from devenv.processes import Supervised, free_port
from provisioner.toolchain.installer import ResolvedTool

SERVICE_CIDR = "10.96.0.0/16"
ADMIN_USER = "atomic-gang-admin"


@dataclass(frozen=True)
class ControlPlaneInfo:
    """What a client needs to reach the control plane."""

    endpoint: str
    kubeconfig: Path
    ca_pem: bytes
    work_dir: Path

    @property
    def ca_base64(self) -> str:
        return base64.b64encode(self.ca_pem).decode()


class ControlPlane:
    """etcd + kube-apiserver, started together and stopped together."""

    def __init__(self, work_dir: Path, etcd: ResolvedTool, apiserver: ResolvedTool) -> None:
        self.work_dir = work_dir
        self._etcd_tool = etcd
        self._apiserver_tool = apiserver
        self.ca = pki.CertificateAuthority()
        self._etcd: Supervised | None = None
        self._apiserver: Supervised | None = None
        self.info: ControlPlaneInfo | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> ControlPlaneInfo:
        started = time.monotonic()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        pki_dir = self.work_dir / "pki"
        logs = self.work_dir / "logs"
        pki_dir.mkdir(exist_ok=True)
        (pki_dir / "ca.crt").write_bytes(self.ca.cert_pem)
        self.ca.serving("127.0.0.1", "localhost", "kubernetes.default.svc").write(
            pki_dir, "apiserver.crt", "apiserver.key"
        )
        pki.service_account_keys().write(pki_dir, "sa.pub", "sa.key")
        admin = self.ca.client(ADMIN_USER, "system:masters")

        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        data_dir = self.work_dir / "etcd-data"
        if data_dir.exists():
            shutil.rmtree(data_dir)
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        self._etcd = Supervised(
            "etcd",
            [
                str(self._etcd_tool.binary),
                f"--data-dir={data_dir}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                # A test control plane trades durability for speed.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            logs / "etcd.log",
        )
        self._etcd.wait_ready(lambda: http_ok(f"{etcd_url}/health"), 30, "etcd /health")

        endpoint = f"https://127.0.0.1:{api_port}"
        self._apiserver = Supervised(
            "kube-apiserver",
            [
                str(self._apiserver_tool.binary),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={pki_dir}",
                f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
                f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
                f"--client-ca-file={pki_dir / 'ca.crt'}",
                f"--service-account-key-file={pki_dir / 'sa.pub'}",
                f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                # No controller-manager mints service-account tokens here.
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false",
                "--endpoint-reconciler-type=none",
                "--v=1",
            ],
            logs / "kube-apiserver.log",
        )
        kubeconfig = self.work_dir / "kubeconfig"
        kubeconfig.write_text(_kubeconfig(endpoint, self.ca.cert_pem, admin))
        kubeconfig.chmod(0o600)
        self.info = ControlPlaneInfo(endpoint, kubeconfig, self.ca.cert_pem, self.work_dir)
        context = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        context.load_cert_chain(*admin.write(pki_dir, "admin.crt", "admin.key"))
        self._apiserver.wait_ready(
            lambda: http_ok(f"{endpoint}/readyz", context), 90, "apiserver /readyz"
        )
        self._wait_default_namespace()
        (self.work_dir / "control-plane.json").write_text(
            json.dumps(
                {
                    "endpoint": endpoint,
                    "kubeconfig": str(kubeconfig),
                    "etcd": etcd_url,
                    "pids": {"etcd": self._etcd.pid, "kube-apiserver": self._apiserver.pid},
                    "startSeconds": round(time.monotonic() - started, 2),
                },
                indent=2,
            )
        )
        return self.info

    def stop(self) -> None:
        for child in (self._apiserver, self._etcd):
            if child is not None:
                child.stop()
        self._apiserver = self._etcd = None

    def __enter__(self) -> ControlPlaneInfo:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients and objects ------------------------------------------------------------------
    def api_client(self) -> k8s.ApiClient:
        assert self.info is not None, "control plane not started"
        return api_client(self.info.kubeconfig)

    def _wait_default_namespace(self) -> None:
        core = k8s.CoreV1Api(self.api_client())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                core.read_namespace("default")
                return
            except ApiException:
                time.sleep(0.2)
        raise TimeoutError("the apiserver never created the default namespace")

    def install_crds(self, documents: Iterable[dict[str, Any]]) -> list[str]:
        return install_crds(self.api_client(), documents)


def api_client(kubeconfig: Path) -> k8s.ApiClient:
    """A new client; its pooled connections are closed when it is collected.

    The kubernetes client never closes its urllib3 pool, so each dropped client left its
    TLS sockets to the garbage collector, which reported them (a ResourceWarning) in
    whichever test happened to collect them."""
    client = k8s_config.new_client_from_config(config_file=str(kubeconfig))
    weakref.finalize(client, client.rest_client.pool_manager.clear)
    return client


def install_crds(api: k8s.ApiClient, documents: Iterable[dict[str, Any]]) -> list[str]:
    """Create (or replace) CRDs and wait until each is Established."""
    ext = k8s.ApiextensionsV1Api(api)
    names: list[str] = []
    for doc in documents:
        name = doc["metadata"]["name"]
        try:
            ext.create_custom_resource_definition(doc)
        except ApiException as err:
            if err.status != 409:
                raise
            current = ext.read_custom_resource_definition(name)
            doc = {**doc, "metadata": {**doc["metadata"]}}
            doc["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, doc)
        names.append(name)
    deadline = time.monotonic() + 60
    for name in names:
        while True:
            crd = ext.read_custom_resource_definition(name)
            conditions = {c.type: c.status for c in (crd.status.conditions or [])}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} was not Established within 60s: {conditions}")
            time.sleep(0.1)
    return names


def ensure_namespace(api: k8s.ApiClient, name: str) -> None:
    """Create the namespace unless it is there (a restart over the same etcd keeps it)."""
    try:
        k8s.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    except ApiException as err:
        if err.status != 409:
            raise


def load_yaml_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _kubeconfig(endpoint: str, ca_pem: bytes, admin: pki.KeyPair) -> str:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "atomic-gang-local",
                    "cluster": {"server": endpoint, "certificate-authority-data": b64(ca_pem)},
                }
            ],
            "users": [
                {
                    "name": ADMIN_USER,
                    "user": {
                        "client-certificate-data": b64(admin.cert_pem),
                        "client-key-data": b64(admin.key_pem),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "atomic-gang-local",
                    "context": {"cluster": "atomic-gang-local", "user": ADMIN_USER},
                }
            ],
            "current-context": "atomic-gang-local",
        }
    )


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, timeout=2, context=context) as resp:
        return bool(resp.status == 200)
