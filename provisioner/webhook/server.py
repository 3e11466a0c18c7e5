"""The gang job validating webhook's HTTPS server: a Starlette app served by uvicorn.

The controller process starts one `WebhookServer` next to its reconcilers (every replica
serves, leader or not: admission must not wait for an election); `python -m
provisioner.webhook` runs it alone, as the integration tests do. Routes:

- `POST /validate-gang-jobs`: AdmissionReview v1 in, AdmissionReview v1 out (`review`), for
  Jobs, JobSets, PyTorchJobs and TrainJobs, each recognised by the request's kind (a kind
  it does not judge, a misregistration, is a 400 naming it). When the pool a gang job names
  cannot be read, a 503: the apiserver's failurePolicy decides.
- `POST /validate-batch-v1-job`: the same for Jobs only, the path a webhook configuration
  written before the other kinds names (it stays served until that configuration is
  replaced by an upgrade).
- `POST /validate-gang-pods`: AdmissionReview v1 for Pods (`pods.review_pod`): a pod that
  would run on a pool's nodes is refused unless its namespace may use the pool. When a
  node, pool or owner cannot be read, a 503, as above.
- `GET /healthz`: 200 once serving.

The certificate and key are read from files: a mounted Secret (cert-manager, or a provided
Secret), or the files `rotator.CertRotator` writes (the chart's selfSigned mode, where the
controller makes and rotates its own). Both are replaced in place, so the server re-reads
them when they change and new TLS sessions get the new certificate without a restart.

A Job naming a capacity reservation is checked against its tags
(DescribeCapacityReservations, `cloud.reservation_tags`), a Job naming its own AMI against
`amiPolicy` with EC2 (DescribeImages, on the controller's credentials, `cloud.images`),
and a gang's pod requests against its instance type (DescribeInstanceTypes,
`cloud.type_figures`); those calls run in a worker thread so one slow answer does not hold
up other admissions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from provisioner.api.ami_policy import ImageOwners
from provisioner.api.pod_fit import InstanceTypes
from provisioner.api.reservation_policy import ReservationTags
from provisioner.api.settings import Settings
from provisioner.api.tenancy import ClusterReadError
from provisioner.cloud.ec2api import webhook_ec2_client
from provisioner.cloud.images import Ec2ImageOwners
from provisioner.cloud.reservation_tags import Ec2ReservationTags
from provisioner.cloud.type_figures import Ec2InstanceTypes
from provisioner.webhook.controller_refs import OwnerLookup, no_owners
from provisioner.webhook.counting import CountedReviews, ReviewObserver
from provisioner.webhook.gang_queue import QueueClasses, no_classes
from provisioner.webhook.pods import NodeLookup, no_nodes, review_pod
from provisioner.webhook.review import GANG_KINDS, JOB, GangKind, PoolLookup, review

__all__ = [
    "DEFAULT_CERT_DIR",
    "GANG_JOB_WEBHOOK_PATH",
    "GANG_POD_WEBHOOK_PATH",
    "JOB_WEBHOOK_PATH",
    "MAX_BODY_BYTES",
    "WebhookServer",
    "build_app",
]

log = logging.getLogger(__name__)

GANG_JOB_WEBHOOK_PATH: Final = "/validate-gang-jobs"
JOB_WEBHOOK_PATH: Final = "/validate-batch-v1-job"
GANG_POD_WEBHOOK_PATH: Final = "/validate-gang-pods"
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


def build_app(
    settings: Settings,
    *,
    pools: PoolLookup,
    images: ImageOwners | None = None,
    instance_types: InstanceTypes | None = None,
    nodes: NodeLookup = no_nodes,
    owners: OwnerLookup = no_owners,
    reservations: ReservationTags | None = None,
    classes: QueueClasses = no_classes,
) -> Starlette:
    """The ASGI app, judging gang jobs and pods against `settings` (the controller's own),
    the pools `pools` reads, who owns a Job's AMI as `images` answers (None: only
    amiPolicy.allowedImageIds pass) and what a node of a type offers as `instance_types`
    answers (None: pod requests are left to the Workload path). `nodes` tells the pool of a
    node a pod names and `owners` proves a controller reference; the defaults prove nothing
    (fail closed). `reservations` answers a capacity reservation's tags (None: a Job
    naming one is refused). `classes` finds the GangClass behind a Job's queue."""

    def judge(kinds: tuple[GangKind, ...] | None, body: Any) -> dict[str, Any]:
        if kinds is None:
            return review_pod(body, settings, pools=pools, nodes=nodes, owners=owners)
        return review(
            body,
            settings,
            pools=pools,
            images=images,
            kinds=kinds,
            instance_types=instance_types,
            owners=owners,
            reservations=reservations,
            classes=classes,
        )

    def validator(kinds: tuple[GangKind, ...] | None) -> Callable[[Request], Awaitable[Response]]:
        async def validate(request: Request) -> Response:
            raw = await _read_body(request)
            if raw is None:
                return PlainTextResponse("request body too large", status_code=413)
            try:
                # The pool, node, owner and image reads block: off the event loop, so one
                # slow read stalls no other.
                answer = await run_in_threadpool(judge, kinds, json.loads(raw))
            except ValueError as err:  # ReviewError and json.JSONDecodeError are ValueErrors
                log.warning("bad admission request: %s", err)
                return PlainTextResponse(f"bad admission request: {err}", status_code=400)
            except ClusterReadError as err:
                log.warning("object not judged: %s", err)
                return PlainTextResponse(str(err), status_code=503)
            verdict = answer["response"]
            if not verdict["allowed"]:
                details = verdict["status"]["details"]
                log.info(
                    "refused gang %s %s: %s",
                    details.get("kind"),
                    details.get("name"),
                    verdict["status"]["message"],
                )
            return JSONResponse(answer)

        return validate

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(
        routes=[
            Route(GANG_JOB_WEBHOOK_PATH, validator(GANG_KINDS), methods=["POST"]),
            Route(JOB_WEBHOOK_PATH, validator((JOB,)), methods=["POST"]),
            Route(GANG_POD_WEBHOOK_PATH, validator(None), methods=["POST"]),
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
    """uvicorn over TLS for `build_app(settings, pools=...)`, with certificate reloading."""

    def __init__(
        self,
        settings: Settings,
        cert_file: Path | str,
        key_file: Path | str,
        *,
        pools: PoolLookup,
        host: str = "0.0.0.0",
        port: int | None = None,
        reload_interval: float = 30.0,
        images: ImageOwners | None = None,
        observer: ReviewObserver | None = None,
        instance_types: InstanceTypes | None = None,
        nodes: NodeLookup = no_nodes,
        owners: OwnerLookup = no_owners,
        reservations: ReservationTags | None = None,
        classes: QueueClasses = no_classes,
    ) -> None:
        """`images`, `instance_types` and `reservations` default to EC2 on the controller's
        own credentials (`cloud.images`, `cloud.type_figures`, `cloud.reservation_tags`);
        `observer` (the controller's metrics) is told of every answer (`counting`); `nodes`
        `owners` and `classes` as in `build_app`."""
        self.cert_file, self.key_file = Path(cert_file), Path(key_file)
        self._reload_interval = reload_interval
        if images is None or instance_types is None or reservations is None:
            # One client serves the three reads: a client per read made four of each.
            ec2 = webhook_ec2_client(settings.defaults.region, settings.aws.endpoint_url)
            images = images if images is not None else Ec2ImageOwners(ec2)
            instance_types = instance_types if instance_types is not None else Ec2InstanceTypes(ec2)
            reservations = reservations if reservations is not None else Ec2ReservationTags(ec2)
        app: Any = build_app(
            settings,
            pools=pools,
            images=images,
            instance_types=instance_types,
            nodes=nodes,
            owners=owners,
            reservations=reservations,
            classes=classes,
        )
        if observer is not None:
            app = CountedReviews(app, observer)
        self._config = uvicorn.Config(
            app,
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
        self._serving_cert_pem: bytes | None = None

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

    @property
    def serving_cert_pem(self) -> bytes | None:
        """The certificate loaded into the live TLS context (None before serving): what the
        readiness rule checks against the webhook configuration's caBundle."""
        return self._serving_cert_pem

    def stop(self) -> None:
        """Ask the server to stop; safe from any thread."""
        self._server.should_exit = True

    def run(self) -> None:
        """Serve until `stop()`; blocks. Call from a thread of its own or the main one."""
        asyncio.run(self.serve())

    async def serve(self) -> None:
        loaded = self.cert_file.read_bytes()
        self._config.load()
        self._serving_cert_pem = loaded
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
            loaded = self.cert_file.read_bytes()
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (OSError, ssl.SSLError) as err:
            log.warning("webhook certificate not reloaded (keeping the old one): %s", err)
            return seen
        self._serving_cert_pem = loaded
        log.info("webhook certificate reloaded from %s", self.cert_file)
        return now
