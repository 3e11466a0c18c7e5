"""Counting the webhook's answers, by the reviewed object's kind and the answer.

`CountedReviews` wraps the webhook's ASGI app (`server.WebhookServer` does, when given an
observer): it reads the AdmissionReview's kind from the request body as it streams past and
the verdict from the answer, and tells a `ReviewObserver` (the controller's metrics,
``controllers.metrics.WebhookMetrics``) once per POST. It sits outside the routes, so it
counts every path the same way, including requests that never reach a handler.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final, Protocol

__all__ = ["KINDS", "CountedReviews", "ReviewObserver", "kind_of", "result_of"]

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

# The kinds the webhook judges (gang jobs, and the pods it keeps off other namespaces' gang
# nodes); any other kind a request names is counted as "other", so a caller cannot grow
# the label set.
KINDS: Final = frozenset({"Job", "JobSet", "PyTorchJob", "TrainJob", "MPIJob", "Pod"})
# The most of a request body read for its kind (the server refuses larger ones anyway).
_BODY_LIMIT: Final = 8 * 1024 * 1024

RESULT_BY_STATUS: Final = {
    400: "bad-request",
    413: "too-large",
    503: "unavailable",
}


class ReviewObserver(Protocol):
    def reviewed(self, kind: str, result: str) -> None: ...


def kind_of(body: bytes) -> str:
    """The AdmissionReview's request.kind.kind, if it is one of `KINDS`; else "other"."""
    try:
        review = json.loads(body)
        kind = str(((review.get("request") or {}).get("kind") or {}).get("kind") or "")
    except (ValueError, AttributeError):
        return "other"
    return kind if kind in KINDS else "other"


def result_of(status: int, answer: bytes) -> str:
    """allowed or denied (a 200's verdict), else the status's name in `RESULT_BY_STATUS`,
    else error."""
    if status == 200:
        try:
            allowed = json.loads(answer)["response"]["allowed"]
        except (ValueError, KeyError, TypeError):
            return "error"
        return "allowed" if allowed is True else "denied"
    return RESULT_BY_STATUS.get(status, "error")


class CountedReviews:
    """ASGI middleware: `observer.reviewed(kind, result)` once per POST to ``app``."""

    def __init__(self, app: App, observer: ReviewObserver) -> None:
        self._app = app
        self._observer = observer

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        body = bytearray()
        answer = bytearray()
        status = 0
        counted = False

        def count() -> None:
            nonlocal counted
            if not counted:
                counted = True
                self._observer.reviewed(kind_of(bytes(body)), result_of(status, bytes(answer)))

        async def reading() -> Message:
            message = await receive()
            if message.get("type") == "http.request" and len(body) <= _BODY_LIMIT:
                body.extend(message.get("body", b""))
            return message

        async def answering(message: Message) -> None:
            nonlocal status
            # Counted before the status line (or, for a verdict, its last byte) leaves:
            # whoever reads the answer then sees the count.
            if message.get("type") == "http.response.start":
                status = int(message.get("status", 0))
                if status != 200:
                    count()
            elif message.get("type") == "http.response.body" and status == 200:
                answer.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    count()
            await send(message)

        try:
            await self._app(scope, reading, answering)
        finally:
            count()  # an app that failed before answering
