"""Fixtures for the `provisioner/kube` integration tests, on the session control plane.

Loaded by the tests that need them through `pytest_plugins`:
- `kube_client`: a `KubeClient` for the admin kubeconfig (one per session);
- `widgets`: a tiny namespaced CRD with a status subresource in a test-only group, so the
  runtime is exercised on a custom resource without depending on our product CRD's schema
  (its typed view is `tests.support.widgets.Widget`);
- `flaky_kube_client`: a `KubeClient` that reaches the same apiserver through a TCP proxy
  the test can cut (`.proxy.outage()`) and restore (`.proxy.restore()`). To the client that
  looks like an apiserver restart: open connections reset, new ones refused, then back.
  The shared apiserver itself is never touched, so other tests are unaffected.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from provisioner.kube.client import KubeClient
from provisioner.kube.resources import ResourceRef
from tests.support.widgets import WIDGETS


def widget_crd() -> dict[str, Any]:
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{WIDGETS.plural}.{WIDGETS.group}"},
        "spec": {
            "group": WIDGETS.group,
            "scope": "Namespaced",
            "names": {"plural": WIDGETS.plural, "singular": "widget", "kind": WIDGETS.kind},
            "versions": [
                {
                    "name": WIDGETS.version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": open_object, "status": open_object},
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="session")
def kube_client(control_plane: Any) -> Iterator[KubeClient]:
    client = KubeClient.from_kubeconfig(control_plane.info.kubeconfig)
    yield client
    client.close()


@pytest.fixture(scope="session")
def widgets(control_plane: Any) -> ResourceRef:
    control_plane.install_crds([widget_crd()])
    return WIDGETS


class TcpProxy:
    """Forwards 127.0.0.1:<port> to the apiserver; can go down and come back on one port."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.port = 0
        self.restore()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def restore(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def outage(self) -> None:
        """Refuse new connections and reset the open ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, []
        if listener is not None:
            _close(listener)
        for conn in connections:
            _close(conn)

    def close(self) -> None:
        self.outage()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed by an outage
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:
                    _close(client)
                    _close(upstream)
                    return
                self._connections += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _close(src)
        _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@dataclass
class FlakyClient:
    client: KubeClient
    proxy: TcpProxy


@pytest.fixture
def flaky_kube_client(control_plane: Any) -> Iterator[FlakyClient]:
    endpoint = urlsplit(control_plane.info.endpoint)
    proxy = TcpProxy(endpoint.hostname or "127.0.0.1", endpoint.port or 443)
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config(
        config_file=str(control_plane.info.kubeconfig), client_configuration=configuration
    )
    configuration.host = proxy.url
    # Fail fast while the proxy is down instead of urllib3's default retries.
    configuration.retries = 0
    client = KubeClient(k8s_client.ApiClient(configuration), timeout=5.0)
    yield FlakyClient(client, proxy)
    proxy.close()
    client.close()
