"""`S3Fence`: the state bucket as the Pulumi CLI sees it, reached through this process, so
that a replica that lost the Lease writes nothing to a stack even while it is paused.

Why a forwarding endpoint and not only a kill: killing the CLI when the renew deadline
passes (``fence``) needs the controller to run. A controller stopped with SIGSTOP (a
debugger, a frozen cgroup, a VM paused) kills nothing, and if only its own pid was stopped
its CLI child keeps running and keeps writing the checkpoint while a new leader writes the
same one. Routed through here, the CLI's S3 requests are answered by a thread of the
controller: while the controller is paused they wait, and when it resumes each write is
checked against the fence *right before it is sent* — its monotonic deadline has passed, so
it is refused (503) and never reaches S3; the CLI fails, and the fence's watch kills it.

How: the driver sets ``AWS_ENDPOINT_URL_S3`` for every CLI process to this endpoint
(http://127.0.0.1:<port>, so the CLI's SDK addresses buckets path-style). Each request is
re-signed with SigV4 (``cloud.s3_signing``: botocore's `S3SigV4Auth`, payload signed) with
the controller's own credentials (the default chain, as every other AWS call of the
controller) and sent to the real endpoint: ``aws.endpointUrl`` when set (the local emulator), else
``https://s3.<region>.amazonaws.com``. Reads (GET, HEAD) always pass, so a standby can list
and read stacks; writes (PUT, POST, DELETE) pass only while the fence is open. The CLI's
own signature is dropped, not checked: the endpoint listens on the loopback interface only.
The CLI sends its requests one after another (about 70 for a new pool's prepare), so the
hop must hold no answer back: each is written with TCP_NODELAY (the handler says why).

Alternatives weighed: S3 conditional writes (If-Match on the checkpoint's ETag) would make
S3 itself the fence, but the CLI does not send them and its lock and history objects are
new keys each time; a kill on resume alone leaves the CLI's requests already queued in the
kernel to go out before the controller's first instruction runs.

Residual window: a write checked while the fence was open and then held before it leaves
(the process stopped between the check and the send) reaches S3 late; see ``fence``.

One write is answered here and not forwarded while checkpoint backups are off
(``cli_env.BACKEND_TUNING``; the driver passes ``drop_checkpoint_copies``): the CLI's copy of
a stack's checkpoint to `.pulumi/stacks/<project>/<stack>.json.bak`, which it makes (a HEAD,
then a CopyObject) before every checkpoint write. Nothing reads that copy: not the CLI, not
`recover()` (it reads the checkpoint and its pending operations). It holds the checkpoint
the write is about to replace, which the bootstrap's versioned bucket keeps as the object's
previous version, and the copy a `destroy --remove` makes of the last checkpoint stayed in
the bucket for good. It is answered as S3 answers a copy (200, a CopyObjectResult) after the
same fence check as every write; every other copy (the update history's) is forwarded.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

import urllib3

from provisioner.api.settings import Settings
from provisioner.cloud.s3_signing import S3RequestSigner
from provisioner.pulumi_driver.fence import Fence, FenceClosed
from provisioner.pulumi_driver.orphan_locks import s3_location

__all__ = [
    "FENCE_HEADER",
    "WRITE_METHODS",
    "S3Fence",
    "is_checkpoint_copy",
    "regional_endpoint",
    "s3_fence_for",
]

log = logging.getLogger(__name__)

WRITE_METHODS: Final = frozenset({"PUT", "POST", "DELETE"})
# Names the replica on each request it forwards (also in the User-Agent), for S3 server
# access logs and the emulator's write log; it carries no authority.
FENCE_HEADER: Final = "x-atomic-gang-writer"
# Not forwarded: the signature's own headers (re-made here) and hop-by-hop headers.
_DROPPED: Final = frozenset(
    {
        "host",
        "authorization",
        "x-amz-date",
        "x-amz-security-token",
        "x-amz-content-sha256",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
        FENCE_HEADER,
    }
)
_NOT_RETURNED: Final = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}
)


def regional_endpoint(region: str) -> str:
    return f"https://s3.{region}.amazonaws.com"


def s3_fence_for(settings: Settings, fence: Fence, drop_checkpoint_copies: bool) -> S3Fence | None:
    """The driver's fence in front of the settings' state bucket; None for a backend that is
    not S3."""
    where = s3_location(settings)
    if where is None:
        return None
    return S3Fence(
        fence,
        upstream=where.endpoint_url or regional_endpoint(where.region),
        signer=S3RequestSigner(where.region),
        writer=f"{socket.gethostname()}/{os.getpid()}",
        drop_checkpoint_copies=drop_checkpoint_copies,
    )


class S3Fence:
    """A loopback HTTP endpoint forwarding S3 requests, writes only while ``fence`` is open."""

    def __init__(
        self,
        fence: Fence,
        *,
        upstream: str,
        signer: S3RequestSigner,
        writer: str,
        drop_checkpoint_copies: bool = False,
    ) -> None:
        self._fence = fence
        self.drop_checkpoint_copies = drop_checkpoint_copies
        self._upstream = upstream.rstrip("/")
        self._signer = signer
        self.writer = writer
        # No retries here: the CLI's SDK retries what S3 refuses, each try fenced anew.
        self._http = urllib3.PoolManager(
            maxsize=16, retries=False, timeout=urllib3.Timeout(connect=10.0, read=300.0)
        )
        self.refused = 0
        self.copies_dropped = 0  # checkpoint copies answered here (module docstring)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="s3-fence", daemon=True)
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._http.clear()

    # -- one request --------------------------------------------------------------------
    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Sign and send one request; (status, headers, body) of S3's answer, or a 503
        answered here when the fence refuses a write."""
        kept = {k: v for k, v in headers.items() if k.lower() not in _DROPPED}
        agent = kept.pop("User-Agent", kept.pop("user-agent", ""))
        kept["User-Agent"] = f"{agent} atomic-gang-fence/{self.writer}".strip()
        kept[FENCE_HEADER] = self.writer
        url = f"{self._upstream}{path}"
        signed = self._signer.sign(method, url, kept, body)
        if method in WRITE_METHODS:
            try:
                self._fence.check()  # the last thing before the bytes leave
            except FenceClosed as closed:
                self.refused += 1
                log.warning("refused an S3 %s of %s: %s", method, path, closed)
                return _refusal(str(closed))
            if self.drop_checkpoint_copies and is_checkpoint_copy(method, path, headers):
                self.copies_dropped += 1
                return _copied()
        answer = self._http.request(
            method,
            url,
            body=body,
            headers=signed,
            redirect=False,
            preload_content=True,
            decode_content=False,
        )
        returned = [
            (k, v)
            for k, v in answer.headers.items()
            if k.lower() not in _NOT_RETURNED
            or (method == "HEAD" and k.lower() == "content-length")
        ]
        return answer.status, returned, answer.data


def is_checkpoint_copy(method: str, path: str, headers: dict[str, str]) -> bool:
    """A CopyObject (a PUT naming its source) to a stack's `.json.bak` (or `.json.gz.bak`,
    `.json.zst.bak`) under `.pulumi/stacks/`."""
    if method != "PUT" or not any(k.lower() == "x-amz-copy-source" for k in headers):
        return False
    key = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
    return "/.pulumi/stacks/" in key and key.endswith(".bak")


def _copied() -> tuple[int, list[tuple[str, str]], bytes]:
    # S3's answer to a CopyObject; the CLI reads neither field.
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><CopyObjectResult>'
        f'<LastModified>{now}</LastModified><ETag>"{"0" * 32}"</ETag></CopyObjectResult>'
    ).encode()
    return 200, [("Content-Type", "application/xml")], body


def _refusal(why: str) -> tuple[int, list[tuple[str, str]], bytes]:
    # S3's own error document, so the CLI's SDK reports it as an S3 error.
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code>'
        f"<Message>write refused by the stack fence: {why}</Message></Error>"
    ).encode()
    return 503, [("Content-Type", "application/xml")], body


def _handler_for(fence: S3Fence) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the CLI's SDK expects
        # An answer leaves as two writes, its headers, then its body. With Nagle's
        # algorithm the body waited for the CLI to acknowledge the headers, which a client
        # with nothing to send does when its delayed-ACK timer fires (40 ms at least on
        # Linux): once per request, and the CLI's requests go one after another. TCP_NODELAY
        # sends each write at once, as the CLI's SDK and S3 do on their ends.
        disable_nagle_algorithm = True

        def _any(self) -> None:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                # S3 itself requires a length (411 MissingContentLength); the CLI's SDK
                # always sends one, and nothing here decodes a chunked body.
                status, returned, data = 411, [("Content-Type", "text/plain")], b"length"
                self.close_connection = True
            else:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, returned, data = self._forwarded(body)
            self.send_response(status)
            for key, value in returned:
                self.send_header(key, value)
            # A HEAD answer carries the object's length but no body.
            has_length = any(k.lower() == "content-length" for k, _ in returned)
            if self.command != "HEAD" or not has_length:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _forwarded(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
            try:
                return fence.forward(self.command, self.path, dict(self.headers.items()), body)
            except Exception as err:  # S3 unreachable: the CLI retries or fails
                log.warning("S3 %s of %s failed: %s", self.command, self.path, err)
                return 502, [("Content-Type", "text/plain")], str(err).encode()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

        def log_message(self, format: str, *args: object) -> None:
            del format, args  # the forwarded calls are logged by their outcome only

    return Handler
