"""The Job validating webhook's HTTPS server: a Starlette app served by uvicorn.

The controller process starts one `WebhookServer` next to its reconcilers (every replica
serves, leader or not: admission must not wait for an election); `python -m
provisioner.webhook` runs it alone, as the integration tests do. Routes:

- `POST /validate-batch-v1-job`: AdmissionReview v1 in, AdmissionReview v1 out (`review`).
- `GET /healthz`: 200 once serving.

The certificate and key are read from files (a mounted Secret). cert-manager and the chart's
self-signed mode replace those files in place, so the server re-reads them when they change
and new TLS sessions get the new certificate without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
from pathlib import Path
from typing import Any, Final

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from provisioner.api.settings import Settings
from provisioner.webhook.review import review

__all__ = ["DEFAULT_CERT_DIR", "JOB_WEBHOOK_PATH", "MAX_BODY_BYTES", "WebhookServer", "build_app"]

log = logging.getLogger(__name__)

JOB_WEBHOOK_PATH: Final = "/validate-batch-v1-job"
# Where the chart mounts the serving certificate Secret (tls.crt, tls.key).
DEFAULT_CERT_DIR: Final = Path("/run/secrets/atomic-gang/webhook")
# The apiserver caps a request at 3 MiB; an AdmissionReview holds the object twice on update.
MAX_BODY_BYTES: Final = 7 * 1024 * 1024


async def _read_body(request: Request) -> bytes | None:
    """The body, or None once it passes MAX_BODY_BYTES (read no further than that)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(settings: Settings) -> Starlette:
    """The ASGI app, judging Jobs against `settings` (the controller's own)."""

    async def validate_job(request: Request) -> Response:
        raw = await _read_body(request)
        if raw is None:
            return PlainTextResponse("request body too large", status_code=413)
        try:
            answer = review(json.loads(raw), settings)
        except ValueError as err:  # ReviewError and json.JSONDecodeError are ValueErrors
            log.warning("bad admission request: %s", err)
            return PlainTextResponse(f"bad admission request: {err}", status_code=400)
        verdict = answer["response"]
        if not verdict["allowed"]:
            details = verdict["status"]["details"]
            log.info(
                "refused gang Job %s: %s",
                details.get("name"),
                verdict["status"]["message"],
            )
        return JSONResponse(answer)

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(
        routes=[
            Route(JOB_WEBHOOK_PATH, validate_job, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )


def _stamp(*paths: Path) -> tuple[tuple[int, int], ...]:
    # A mounted Secret is updated by swapping a symlink: the inode changes, not only mtime.
    out = []
    for path in paths:
        st = os.stat(path)
        out.append((st.st_ino, st.st_mtime_ns))
    return tuple(out)


class WebhookServer:
    """uvicorn over TLS for `build_app(settings)`, with certificate reloading."""

    def __init__(
        self,
        settings: Settings,
        cert_file: Path | str,
        key_file: Path | str,
        *,
        host: str = "0.0.0.0",
        port: int | None = None,
        reload_interval: float = 30.0,
    ) -> None:
        self.cert_file, self.key_file = Path(cert_file), Path(key_file)
        self._reload_interval = reload_interval
        self._config = uvicorn.Config(
            build_app(settings),
            host=host,
            port=settings.webhook_port if port is None else port,
            ssl_certfile=str(self.cert_file),
            ssl_keyfile=str(self.key_file),
            # The controller owns logging; uvicorn must not reconfigure it.
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(self._config)

    @classmethod
    def from_cert_dir(
        cls, settings: Settings, cert_dir: Path | str = DEFAULT_CERT_DIR, **kwargs: Any
    ) -> WebhookServer:
        """A server for a mounted kubernetes.io/tls Secret (tls.crt and tls.key)."""
        return cls(settings, Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key", **kwargs)

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The live TLS context, once serving (None before)."""
        return self._config.ssl if self._config.loaded else None

    def stop(self) -> None:
        """Ask the server to stop; safe from any thread."""
        self._server.should_exit = True

    def run(self) -> None:
        """Serve until `stop()`; blocks. Call from a thread of its own or the main one."""
        asyncio.run(self.serve())

    async def serve(self) -> None:
        self._config.load()
        context = self._config.ssl
        assert context is not None  # a cert and key were given
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        reloader = asyncio.create_task(self._reload_forever(context))
        try:
            await self._server.serve()
        finally:
            reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reloader

    async def _reload_forever(self, context: ssl.SSLContext) -> None:
        seen = _stamp(self.cert_file, self.key_file)
        while True:
            await asyncio.sleep(self._reload_interval)
            seen = self.reload_if_changed(context, seen)

    def reload_if_changed(
        self, context: ssl.SSLContext, seen: tuple[tuple[int, int], ...]
    ) -> tuple[tuple[int, int], ...]:
        """Load the files into `context` if they changed since `seen`; return the new stamp.

        A half-written pair (cert and key from different issues) fails to load; the old
        certificate stays in use and the next pass tries again.
        """
        try:
            now = _stamp(self.cert_file, self.key_file)
            if now == seen:
                return seen
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (OSError, ssl.SSLError) as err:
            log.warning("webhook certificate not reloaded (keeping the old one): %s", err)
            return seen
        log.info("webhook certificate reloaded from %s", self.cert_file)
        return now
