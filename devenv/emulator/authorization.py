"""P11: the caller's IAM policy for the launch calls, and EC2's DryRun answer.

moto answers every EC2 call for any caller, and answers `DryRun=True` before it reads the
request, with HTTP 400. EC2 does neither:
- "Troubleshooting API request errors" (Amazon EC2 API Reference), section "Unauthorized
  operation": users and roles have no EC2 permission unless an IAM policy grants it; a call
  without it is refused with `UnauthorizedOperation`, whose message carries an encoded
  authorization failure message that STS `DecodeAuthorizationMessage` decodes (for a caller
  allowed `sts:DecodeAuthorizationMessage`).
- "Common request parameters" / each action's `DryRun` parameter: "Checks whether you have
  the required permissions for the action, without actually making the request, and
  provides an error response. If you have the required permissions, the error response is
  DryRunOperation. Otherwise, it is UnauthorizedOperation." "Error codes for the Amazon EC2
  API" gives DryRunOperation's message ("Request would have succeeded, but DryRun flag is
  set.") and HTTP 412, and UnauthorizedOperation's 403. The request's parameters are
  checked too (a dry run with a subnet that does not exist is refused for it), so the
  launch handlers answer `DryRunOperation` only after their own validation (`dry_run_answer`).

What is evaluated, for the actions in `ENFORCED_ACTIONS` only: the identity policies of the
caller (an IAM user's inline and attached policies and its groups'; an assumed role's inline
and attached policies), `Allow`/`Deny` statements on `Action` with `*`/`?` wildcards, an
explicit Deny winning. Resource ARNs, `NotAction`, conditions, permission boundaries, SCPs
and session policies are NOT modelled: a statement applies whatever its Resource and
Condition say. A caller moto knows as neither an IAM user nor an assumed role (the
environment's fixed "local" keys) is the account's root, which no identity policy limits.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import secrets
import threading
import uuid
from collections.abc import Iterator
from typing import Any, Final
from xml.sax.saxutils import escape

from moto.core.responses import ActionResult
from moto.iam.models import iam_backends
from moto.sts.models import sts_backends
from moto.sts.responses import TokenResponse

from devenv.emulator.accounting import access_key
from devenv.emulator.patching import patch

# The launch calls a platform team's launch check sends with DryRun, and STS's decoder.
ENFORCED_ACTIONS: Final = frozenset(
    {
        "ec2:RunInstances",
        "ec2:CreateFleet",
        "ec2:CreateLaunchTemplate",
        "sts:DecodeAuthorizationMessage",
    }
)
DRY_RUN_CODE: Final = "DryRunOperation"
DRY_RUN_MESSAGE: Final = "Request would have succeeded, but DryRun flag is set."
UNAUTHORIZED_CODE: Final = "UnauthorizedOperation"

_messages: dict[str, dict[str, Any]] = {}
_messages_lock = threading.Lock()


class StatusAnswer(Exception):
    """An EC2 error answered with its own HTTP status (moto answers every error with 400)."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


def install_authorization() -> None:
    # STS's DecodeAuthorizationMessage, which moto lacks (its model has the operation).
    patch(TokenResponse, "decode_authorization_message", _decode_authorization_message)


def dry_run_answer(response: Any) -> None:
    """Raise EC2's DryRun answer if the request asked for one: call after its validation."""
    if str(response._get_param("DryRun", False)).lower() == "true":
        raise StatusAnswer(DRY_RUN_CODE, DRY_RUN_MESSAGE, 412)


def as_answer(error: StatusAnswer) -> tuple[str, dict[str, Any]]:
    """What a moto handler returns for `error`: EC2's error document, with its status."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Errors><Error><Code>{escape(error.code)}</Code>"
        f"<Message>{escape(error.message)}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    )
    return body, {"status": error.status, "Content-Type": "text/xml"}


def authorize(response: Any, action: str, resource: str = "*") -> None:
    """Refuse `action` with EC2's UnauthorizedOperation unless the caller's policy allows it."""
    caller, arn, account, documents = _caller(response)
    if documents is None or _allowed(documents, action):
        return
    decoded = {
        "allowed": False,
        "explicitDeny": _denied(documents, action),
        "matchedStatements": {"items": []},
        "failures": {"items": []},
        "context": {
            "principal": {"id": caller, "arn": arn},
            "action": action,
            "resource": resource,
            "conditions": {"items": []},
        },
    }
    token = secrets.token_urlsafe(24)
    with _messages_lock:
        _messages[token] = decoded
    encoded = base64.urlsafe_b64encode(f"{account}:{token}".encode()).decode("ascii")
    raise StatusAnswer(
        UNAUTHORIZED_CODE,
        "You are not authorized to perform this operation. User: "
        f"{arn} is not authorized to perform: {action} on resource: {resource} because no "
        f"identity-based policy allows the {action} action. Encoded authorization failure "
        f"message: {encoded}",
        403,
    )


def _decode_authorization_message(self: Any) -> Any:
    _, arn, _, documents = _caller(self)
    if documents is not None and not _allowed(documents, "sts:DecodeAuthorizationMessage"):
        body = (
            "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
            f"<Message>User: {escape(arn)} is not authorized to perform: "
            "sts:DecodeAuthorizationMessage</Message></Error>"
            f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        )
        return body, {"status": 403, "Content-Type": "text/xml"}
    encoded = str(self._get_param("EncodedMessage") or "")
    try:
        _, token = base64.urlsafe_b64decode(encoded.encode()).decode().split(":", 1)
    except (ValueError, UnicodeDecodeError):
        token = ""
    with _messages_lock:
        decoded = _messages.get(token)
    if decoded is None:
        body = (
            "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidAuthorizationMessageException"
            "</Code><Message>The encoded message is not valid.</Message></Error>"
            f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        )
        return body, {"status": 400, "Content-Type": "text/xml"}
    return ActionResult({"DecodedMessage": json.dumps(decoded)})


def _caller(response: Any) -> tuple[str, str, str, list[Any] | None]:
    """The caller's id, ARN, account and identity policies (None: the root, unlimited)."""
    key = access_key(str(response.headers.get("Authorization") or "")) or ""
    sts = sts_backends[response.current_account][response.partition]
    iam = iam_backends[response.current_account][response.partition]
    assumed = sts.get_assumed_role_from_access_key(key)
    if assumed is not None:
        try:
            role = iam.get_role_by_arn(assumed.role_arn)
        except Exception:
            return assumed.user_id, assumed.arn, assumed.account_id, []
        return assumed.user_id, assumed.arn, assumed.account_id, list(_documents(role))
    user = iam.get_user_from_access_key_id(key)
    if user is not None:
        documents = list(_documents(user))
        for group in iam.get_groups_for_user(user.name):
            documents += list(_documents(group))
        return user.id, user.arn, user.account_id, documents
    return key, f"arn:aws:iam::{response.current_account}:root", response.current_account, None


def _documents(holder: Any) -> Iterator[Any]:
    yield from holder.policies.values()
    for policy in holder.managed_policies.values():
        for version in policy.versions:
            if version.is_default_version:
                yield version.document


def _statements(documents: list[Any]) -> Iterator[dict[str, Any]]:
    for document in documents:
        try:
            policy = json.loads(document) if isinstance(document, str) else document
        except ValueError:
            continue
        statements = (policy or {}).get("Statement") or []
        yield from [statements] if isinstance(statements, dict) else statements


def _matches(statement: dict[str, Any], action: str) -> bool:
    actions = statement.get("Action") or []
    actions = [actions] if isinstance(actions, str) else actions
    # IAM matches action names case-insensitively, with * and ? wildcards.
    return any(fnmatch.fnmatchcase(action.lower(), str(a).lower()) for a in actions)


def _denied(documents: list[Any], action: str) -> bool:
    return any(s.get("Effect") == "Deny" and _matches(s, action) for s in _statements(documents))


def _allowed(documents: list[Any], action: str) -> bool:
    if _denied(documents, action):
        return False
    return any(s.get("Effect") == "Allow" and _matches(s, action) for s in _statements(documents))
