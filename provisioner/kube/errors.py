"""The Kubernetes API's failures, as the few exceptions the controllers act on.

Everything in `provisioner/kube` that talks to the apiserver passes its failures through
`translate`, so callers above this package never see `ApiException` or a urllib3 error.
The controllers and the work queue catch these classes: a conflict is a requeue, not-found
is usually "already done", gone means re-list, unavailable means back off and retry.

Hierarchy::

    KubeError                      any failure; .status (0 when no HTTP answer), .reason
    ├── KubeConflict               409: resourceVersion precondition failed
    │   └── KubeAlreadyExists      409 with reason AlreadyExists (a create lost a race)
    ├── KubeNotFound               404
    ├── KubeGone                   410: watch or list continuation expired; re-list
    ├── KubeForbidden              401, 403
    ├── KubeInvalid                400, 422: the request itself is wrong; retrying won't help
    └── KubeUnavailable            429, 5xx, no connection, timeouts; retry with backoff
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import urllib3.exceptions
from kubernetes.client.rest import ApiException

__all__ = [
    "KubeAlreadyExists",
    "KubeConflict",
    "KubeError",
    "KubeForbidden",
    "KubeGone",
    "KubeInvalid",
    "KubeNotFound",
    "KubeUnavailable",
    "from_status",
    "translate",
    "translated",
]


class KubeError(Exception):
    """A Kubernetes API call failed; `status` is the HTTP status, 0 when none came back."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


class KubeConflict(KubeError):
    """409: someone wrote after we read. Re-read and try again; never overwrite."""


class KubeAlreadyExists(KubeConflict):
    """409 AlreadyExists: a create found the name taken (often by an earlier pass of ours)."""


class KubeNotFound(KubeError):
    """404: the object (or its resource type) does not exist."""


class KubeGone(KubeError):
    """410: the resourceVersion a watch or list continued from was compacted away."""


class KubeForbidden(KubeError):
    """401/403: our identity may not do this; RBAC or credentials need fixing."""


class KubeInvalid(KubeError):
    """400/422: the apiserver rejected the body; the same request will fail again."""


class KubeUnavailable(KubeError):
    """429, 5xx or no answer at all: transient, retry with backoff."""


_BY_STATUS: dict[int, type[KubeError]] = {
    400: KubeInvalid,
    401: KubeForbidden,
    403: KubeForbidden,
    404: KubeNotFound,
    409: KubeConflict,
    410: KubeGone,
    422: KubeInvalid,
    429: KubeUnavailable,
}


def _class_for(status: int, reason: str) -> type[KubeError]:
    if status == 409 and reason == "AlreadyExists":
        return KubeAlreadyExists
    if status == 0 or status >= 500:
        return KubeUnavailable
    return _BY_STATUS.get(status, KubeError)


def from_status(status: Mapping[str, Any]) -> KubeError:
    """The exception for a `Status` object (an API error body or a watch ERROR event)."""
    code = int(status.get("code") or 0)
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or reason or f"HTTP {code}")
    return _class_for(code, reason)(message, status=code, reason=reason)


def translate(err: BaseException) -> KubeError:
    """Map an `ApiException` or a transport error to our hierarchy (others: `KubeError`)."""
    if isinstance(err, KubeError):
        return err
    if isinstance(err, ApiException):
        code = int(err.status or 0)
        body: Any = err.body
        if isinstance(body, bytes):
            body = body.decode("utf-8", errors="replace")
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            return from_status({**parsed, "code": parsed.get("code") or code})
        # The watch helper raises ApiException(status, "Reason: message") for ERROR events.
        reason, _, message = str(err.reason or "").partition(": ")
        return _class_for(code, reason)(
            message or reason or f"HTTP {code}", status=code, reason=reason
        )
    if isinstance(err, urllib3.exceptions.HTTPError | OSError):
        return KubeUnavailable(f"apiserver unreachable: {err}", reason="Unavailable")
    return KubeError(f"{type(err).__name__}: {err}")


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise any API or transport failure inside the block as a `KubeError`."""
    try:
        yield
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as err:
        raise translate(err) from err
