"""The webhook as a process serves it: the server and, with `webhook.selfManaged`, the
certificate rotator feeding it, started, probed for readiness and stopped together. Built by
the composition root (``assembly.build_webhook``)."""

from __future__ import annotations

import threading

from provisioner.webhook.rotator import CertRotator
from provisioner.webhook.server import WebhookServer

__all__ = ["ServedWebhook"]


class ServedWebhook:
    """The webhook server and, with `webhook.selfManaged`, the rotator feeding it.

    `start` serves at once from mounted files; a self-managed server starts once the rotator
    has written its first trusted pair. `ready` is the readiness gate: the server listens
    (a Service sends a Ready pod admission reviews at once, and a fail-closed webhook refuses
    every gang Job while its endpoint refuses connections), and the served certificate's CA
    is in every webhook's caBundle (for mounted files, cert-manager or the installer
    arranges that trust).
    """

    def __init__(
        self, server: WebhookServer, rotator: CertRotator | None, stop: threading.Event
    ) -> None:
        self.server, self.rotator, self._stop = server, rotator, stop
        self._started = threading.Event()
        if rotator is not None:
            rotator.on_new_pair = self._serve

    def _serve(self) -> None:
        if not self._started.is_set():
            self._started.set()
            threading.Thread(target=self.server.run, name="webhook", daemon=True).start()

    def start(self) -> None:
        if self.rotator is None:
            self._serve()
            return
        threading.Thread(
            target=self.rotator.run, args=(self._stop,), name="webhook-certs", daemon=True
        ).start()

    def ready(self) -> bool:
        if not self.server.started:
            return False
        return self.rotator is None or self.rotator.trusts(self.server.serving_cert_pem)

    def stop(self) -> None:
        self._stop.set()
        self.server.stop()
