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
  set.") and HTTP 412, and UnauthorizedOperation's 403. The page documents a permission
  check only, so by default a launch call's dry run answers right after authorization
  (`permission_answer`). Whether EC2 also checks the request's parameters on a dry run is
  not settled by the pages: `set_dry_run_validation(True)` makes the launch handlers
  answer `DryRunOperation` only after their own validation (`dry_run_answer`).

What is evaluated: the identity policies of the caller (an IAM user's inline and attached
policies and its groups'; an assumed role's inline and attached policies), with Action,
Resource and Condition read as IAM documents them (`policy_evaluation`, after "Policy
evaluation logic"), for the calls in `ENFORCED_ACTIONS`. Each call is authorized per
resource, with the condition keys the page "Actions, resources, and condition keys for
Amazon EC2" lists for it:
- a launch (RunInstances, CreateFleet): every resource it creates and uses, with the keys
  the reference lists for each, and `iam:PassRole` of its instance profile's role
  (`launch_contexts`, which says what it follows).
- CreateLaunchTemplate, CreatePlacementGroup: the new resource with its request tags (and
  CreateTags with `ec2:CreateAction` when tagged).
- calls on existing resources (CreateTags, DeleteTags, TerminateInstances, DeleteFleets,
  DeleteNetworkInterface, the launch template version/modify/delete calls,
  DeletePlacementGroup): each named resource's ARN with its `aws:ResourceTag/<key>`, and
  for the tag calls `aws:RequestTag/<key>` and `aws:TagKeys`.
- ssm:GetParameter: the parameter's ARN (AWS's public parameters have no account).
Every key is also given as its `ec2:` alias (`ec2:ResourceTag/<key>`); the evaluator keeps
only the keys the Service Authorization Reference lists for the action and resource type
(`service_reference`), as IAM does.
A refusal names the first resource not allowed. The organization's SCPs are evaluated first,
on every caller (`organization`: one switch, an SCP requiring launch tags). NotPrincipal,
permission boundaries, session policies and policy variables are NOT modelled. A caller
moto knows as neither an IAM user nor an assumed role (the environment's fixed "local"
keys, the node simulator's and the tests' own keys) is the account's root, which no
identity policy limits (an SCP does).
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import uuid
from typing import Any, Final
from xml.sax.saxutils import escape

from moto.core.responses import ActionResult
from moto.sts.responses import TokenResponse

from devenv.emulator import callers
from devenv.emulator.context_keys import arn as _arn
from devenv.emulator.context_keys import as_list as _as_list
from devenv.emulator.context_keys import existing as _existing
from devenv.emulator.context_keys import request_tag_keys as _request_keys
from devenv.emulator.context_keys import tag_keys as _tag_keys
from devenv.emulator.context_keys import tag_specs as _tag_specs
from devenv.emulator.launch_contexts import launch_contexts
from devenv.emulator.patching import patch
from devenv.emulator.policy_evaluation import Decision, RequestContext, evaluate
from devenv.emulator.state import EMULATOR

# The launch calls authorize in their own handlers (their DryRun answer comes after it);
# `refusal` authorizes the others before moto runs them.
_LAUNCH_ACTIONS: Final = frozenset(
    {"ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"}
)
_CHECKED_BEFORE_MOTO: Final = frozenset(
    {
        "ec2:CreateTags",
        "ec2:DeleteTags",
        "ec2:TerminateInstances",
        "ec2:DeleteFleets",
        "ec2:DeleteNetworkInterface",
        "ec2:CreateLaunchTemplateVersion",
        "ec2:ModifyLaunchTemplate",
        "ec2:DeleteLaunchTemplate",
        "ec2:DeleteLaunchTemplateVersions",
        "ec2:CreatePlacementGroup",
        "ec2:DeletePlacementGroup",
        "ec2:DescribeCapacityBlockOfferings",
        "ec2:PurchaseCapacityBlock",
        "ssm:GetParameter",
        "eks:CreateAccessEntry",
    }
)
ENFORCED_ACTIONS: Final = (
    _LAUNCH_ACTIONS | _CHECKED_BEFORE_MOTO | {"sts:DecodeAuthorizationMessage"}
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


def permission_answer(response: Any) -> None:
    """Raise DryRunOperation for a dry run already authorized, unless the switch asks for
    the request's parameters to be checked first (then `dry_run_answer` answers)."""
    if not EMULATOR.dry_run_validates:
        dry_run_answer(response)


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


def authorize(response: Any, action: str) -> None:
    """Refuse `action` with EC2's UnauthorizedOperation unless the account's organization
    (its SCPs, `organization`) and the caller's policy allow it on every resource the
    request touches, under the request's condition keys. SCPs bind every principal of a
    member account, its root user included; an explicit deny in one wins."""
    caller, arn, account, documents = callers.caller(response)
    organization = EMULATOR.organization_documents()
    if documents is None and organization is None:
        return
    for ctx in request_contexts(response, action):
        if organization is not None:
            bounded = evaluate(organization, ctx)
            if bounded is not Decision.ALLOW:
                _refuse(caller, arn, account, ctx, bounded, "service control")
        if documents is None:
            continue
        decision = evaluate(documents, ctx)
        if decision is not Decision.ALLOW:
            _refuse(caller, arn, account, ctx, decision, "identity-based")


def _refuse(
    caller: str, arn: str, account: str, ctx: RequestContext, decision: Decision, kind: str
) -> None:
    """Raise UnauthorizedOperation for `ctx`, worded as "Troubleshoot access denied error
    messages" (IAM User Guide) words a deny by a `kind` policy, with its encoded message."""
    decoded = {
        "allowed": False,
        "explicitDeny": decision is Decision.EXPLICIT_DENY,
        "matchedStatements": {"items": []},
        "failures": {"items": []},
        "context": {
            "principal": {"id": caller, "arn": arn},
            "action": ctx.action,
            "resource": ctx.resource,
            "conditions": {
                "items": [
                    {"key": k, "values": {"items": [{"value": v} for v in _as_list(val)]}}
                    for k, val in sorted(ctx.keys.items())
                    if not k.startswith("ec2:") or k == "ec2:CreateAction"
                ]
            },
        },
    }
    token = secrets.token_urlsafe(24)
    with _messages_lock:
        _messages[token] = decoded
    encoded = base64.urlsafe_b64encode(f"{account}:{token}".encode()).decode("ascii")
    why = (
        f"with an explicit deny in {'an' if kind[0] in 'aeiou' else 'a'} {kind} policy"
        if decoded["explicitDeny"]
        else f"because no {kind} policy allows the {ctx.action} action"
    )
    raise StatusAnswer(
        UNAUTHORIZED_CODE,
        "You are not authorized to perform this operation. User: "
        f"{arn} is not authorized to perform: {ctx.action} on resource: {ctx.resource} "
        f"{why}. Encoded authorization failure message: {encoded}",
        403,
    )


def refusal(response: Any, action: str) -> Any | None:
    """The answer refusing a call in `_CHECKED_BEFORE_MOTO` the caller may not make, else
    None. Called for every call, before moto runs it."""
    qualified = f"{response.service_name}:{action}"
    if qualified not in _CHECKED_BEFORE_MOTO:
        return None
    try:
        authorize(response, qualified)
    except StatusAnswer as answer:
        if response.service_name == "eks":  # EKS answers REST-JSON with a 403
            body = json.dumps({"message": answer.message})
            headers = {
                "Content-Type": "application/json",
                "x-amzn-ErrorType": "AccessDeniedException",
            }
            return 403, headers, body
        if response.service_name == "ssm":  # SSM answers in JSON ("AccessDeniedException")
            body = json.dumps({"__type": "AccessDeniedException", "message": answer.message})
            return 400, {"Content-Type": "application/x-amz-json-1.1"}, body
        body, headers = as_answer(answer)
        return headers["status"], {"Content-Type": "text/xml"}, body
    return None


# --- the request contexts ----------------------------------------------------------------
def _create_contexts(response: Any, action: str, kind: str) -> list[RequestContext]:
    tags = _tag_specs(response.params.get("TagSpecifications")).get(kind)
    keys = _request_keys(tags or {})
    contexts = [RequestContext(action, _arn(response, kind, "*"), keys)]
    if tags:
        contexts.append(
            RequestContext(
                "ec2:CreateTags",
                _arn(response, kind, "*"),
                {**keys, "ec2:CreateAction": action.split(":", 1)[1]},
            )
        )
    return contexts


def _named_template(response: Any) -> list[str]:
    backend = response.ec2_backend
    tid = response._get_param("LaunchTemplateId")
    if not tid:
        name = response._get_param("LaunchTemplateName")
        tid = backend.launch_template_name_to_ids.get(str(name)) if name else None
    return [str(tid)] if tid else []


def request_contexts(response: Any, action: str) -> list[RequestContext]:
    """Every authorization `action` needs, one per resource the request touches."""
    get = response._get_param
    if action in ("ec2:RunInstances", "ec2:CreateFleet"):
        return launch_contexts(response, action)
    if action == "ec2:CreateLaunchTemplate":
        return _create_contexts(response, action, "launch-template")
    if action == "ec2:CreatePlacementGroup":
        return _create_contexts(response, action, "placement-group")
    if action == "ec2:PurchaseCapacityBlock":
        # The reference lists one resource, the new capacity-reservation, with request tags.
        return _create_contexts(response, action, "capacity-reservation")
    if action in ("ec2:CreateTags", "ec2:DeleteTags"):
        tags = {str(t["Key"]): str(t.get("Value") or "") for t in get("Tags", []) or []}
        each = [_existing(response, action, str(rid)) for rid in get("Resources", []) or []]
        return [RequestContext(action, e.resource, {**e.keys, **_request_keys(tags)}) for e in each]
    if action == "ec2:TerminateInstances":
        return [_existing(response, action, str(i), "instance") for i in get("InstanceIds", [])]
    if action == "ec2:DeleteFleets":
        return [_existing(response, action, str(i), "fleet") for i in get("FleetIds", [])]
    if action == "ec2:DeleteNetworkInterface":
        eni = str(get("NetworkInterfaceId") or "")
        return [_existing(response, action, eni, "network-interface")]
    if action in (
        "ec2:CreateLaunchTemplateVersion",
        "ec2:ModifyLaunchTemplate",
        "ec2:DeleteLaunchTemplate",
        "ec2:DeleteLaunchTemplateVersions",
    ):
        return [
            _existing(response, action, t, "launch-template") for t in _named_template(response)
        ]
    if action == "ec2:DeletePlacementGroup":
        name = str(get("GroupName") or "")
        try:
            group = EMULATOR.placement_groups.find(response.ec2_backend, name=name)
        except Exception:
            return []  # the call itself answers InvalidPlacementGroup.Unknown
        return [
            RequestContext(
                action,
                _arn(response, "placement-group", name),
                _tag_keys("ResourceTag", dict(group.tags)),
            )
        ]
    if action == "eks:CreateAccessEntry":
        # "Actions, resources, and condition keys for Amazon EKS": the cluster, with the
        # entry's principal, type (STANDARD when the request names none), groups, username
        # and request tags.
        keys: dict[str, Any] = {
            "eks:principalArn": str(get("principalArn") or ""),
            "eks:accessEntryType": str(get("type") or "STANDARD"),
            **_request_keys({str(k): str(v) for k, v in (get("tags") or {}).items()}),
        }
        if get("kubernetesGroups"):
            keys["eks:kubernetesGroups"] = [str(g) for g in get("kubernetesGroups")]
        if get("username"):
            keys["eks:username"] = str(get("username"))
        cluster = str(get("name") or "")
        return [RequestContext(action, _arn(response, "cluster", cluster, service="eks"), keys)]
    if action == "ssm:GetParameter":
        name = str(get("Name") or "")
        account = "" if name.startswith("/aws/") else response.current_account
        path = name if name.startswith("/") else f"/{name}"
        return [
            RequestContext(
                action, f"arn:{response.partition}:ssm:{response.region}:{account}:parameter{path}"
            )
        ]
    return [RequestContext(action, "*")]


def _decode_authorization_message(self: Any) -> Any:
    _, arn, _, documents = callers.caller(self)
    if documents is not None and (
        evaluate(documents, RequestContext("sts:DecodeAuthorizationMessage", "*"))
        is not Decision.ALLOW
    ):
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
