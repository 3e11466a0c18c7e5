"""A training controller's webhooks are registered only once each hook's path has a handler.

JobSet and Trainer add their webhook handlers in a goroutine after their /readyz can pass;
meanwhile their server answers a hook's path with 404. A server here plays that: paths it
handles answer as controller-runtime's admission handler does (an HTTP answer, 200 or a
refusal of an empty review); the others 404, as Go's mux does.
"""

from __future__ import annotations

import ssl
import threading
import urllib.error
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest

from devenv.controller_webhooks import OwnWebhooks, Webhooks, hooks_served
from devenv.controlplane import ControlPlane
from devenv.pki import CertificateAuthority
from provisioner.toolchain.installer import ResolvedTool


class _Server:
    def __init__(self, tmp: Path) -> None:
        self.handled: dict[str, int] = {}  # path -> status its handler answers with
        ca = CertificateAuthority()
        cert, key = ca.serving("127.0.0.1").write(tmp, "tls.crt", "tls.key")
        handled = self.handled

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.send_response(handled.get(self.path, 404))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
        self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.client = ssl.create_default_context(cadata=ca.cert_pem.decode())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[_Server]:
    s = _Server(tmp_path)
    thread = threading.Thread(target=s.httpd.serve_forever, daemon=True)
    thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def _configurations(port: int, *paths: str) -> list[dict[str, Any]]:
    hooks = [{"clientConfig": {"url": f"https://127.0.0.1:{port}{p}"}} for p in paths]
    return [{"kind": "ValidatingWebhookConfiguration", "webhooks": hooks}]


def test_hooks_are_served_only_once_every_path_has_a_handler(server: _Server) -> None:
    docs = _configurations(server.port, "/mutate-jobset", "/validate-jobset")
    assert not hooks_served(docs, server.client)  # listening, nothing registered yet

    server.handled["/mutate-jobset"] = 200
    assert not hooks_served(docs, server.client)  # one of two

    server.handled["/validate-jobset"] = 400  # a handler refusing the empty review
    assert hooks_served(docs, server.client)


def test_a_server_that_cannot_be_verified_is_not_serving(server: _Server) -> None:
    server.handled["/validate-jobset"] = 200
    docs = _configurations(server.port, "/validate-jobset")
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        hooks_served(docs, ssl.create_default_context())  # not our CA: the probe raises


_MANIFEST = """\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjob.kueue.x-k8s.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  rules: [{apiGroups: [batch], resources: [jobs], operations: [CREATE]}]
- name: mrayjob.kueue.x-k8s.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-ray}}
  rules: [{apiGroups: [ray.io], resources: [rayjobs], operations: [CREATE]}]
- name: mworkload.kueue.x-k8s.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-workload}}
  rules: [{apiGroups: [kueue.x-k8s.io], resources: [workloads], operations: [CREATE]}]
"""


class _Tool:
    """What `Webhooks.configurations` reads of a resolved tool: its module's assets."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def asset(self, relative: str) -> Path:
        return self.root / relative


def test_configurations_keep_the_wanted_hooks_at_a_local_url_and_skip_namespaces(
    tmp_path: Path,
) -> None:
    (tmp_path / "manifests.yaml").write_text(_MANIFEST)
    tool = cast(ResolvedTool, _Tool(tmp_path))
    kueue_like = OwnWebhooks(
        "manifests.yaml",
        "kueue",
        groups=frozenset({"kueue.x-k8s.io"}),
        resources=frozenset({("batch", "jobs")}),
        skip_namespaces=("kube-system", "kueue-system"),
    )
    (doc,) = Webhooks(cast(ControlPlane, None), kueue_like).configurations(tool, 9443, b"CA")
    assert doc["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    hooks = {hook["name"]: hook for hook in doc["webhooks"]}
    assert set(hooks) == {"mjob.kueue.x-k8s.io", "mworkload.kueue.x-k8s.io"}  # no ray
    assert hooks["mjob.kueue.x-k8s.io"]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-batch-v1-job",
        "caBundle": "Q0E=",
    }
    skipped = hooks["mjob.kueue.x-k8s.io"]["namespaceSelector"]["matchExpressions"][0]
    assert (skipped["operator"], skipped["values"]) == ("NotIn", ["kube-system", "kueue-system"])

    jobset_like = OwnWebhooks("manifests.yaml", "jobset", frozenset({"kueue.x-k8s.io"}))
    (doc,) = Webhooks(cast(ControlPlane, None), jobset_like).configurations(tool, 1, b"CA")
    assert [hook["name"] for hook in doc["webhooks"]] == ["mworkload.kueue.x-k8s.io"]
    assert "namespaceSelector" not in doc["webhooks"][0]  # nothing skipped: none added
