"""P10: STS AssumeRole checks the role's trust, and KMS refuses keys that are not Enabled.

moto's AssumeRole hands out credentials for any ARN, even a role that does not exist, and
its Encrypt, Decrypt and GenerateDataKey work with a disabled key or one pending deletion.
AWS refuses both; a tool that checks "can this identity use that role / that key" would
pass against moto where it fails against AWS.

AssumeRole here is allowed when the role exists and a trust statement allows
`sts:AssumeRole` for an AWS principal that is the caller's ARN, its account's root
(`arn:aws:iam::<account>:root` or the bare account id) or `*`. Conditions, denies, service
principals (which no direct caller is) and session policies are not modelled. The refusal
is AWS's: AccessDenied, "User: <caller> is not authorized to perform: sts:AssumeRole on
resource: <role>".
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from moto.core.exceptions import AccessDeniedError
from moto.iam.models import iam_backends
from moto.kms.exceptions import JsonRESTError
from moto.kms.models import KmsBackend
from moto.sts.responses import TokenResponse

from devenv.emulator.patching import original, patch


def install_identity() -> None:
    patch(TokenResponse, "assume_role", _assume_role)
    for name in ("encrypt", "decrypt", "generate_data_key"):
        patch(KmsBackend, name, _usable_key_only(name))


def _trusts(document: str, caller: str, account: str) -> bool:
    try:
        policy = json.loads(unquote(document)) if isinstance(document, str) else document
    except ValueError:
        return False
    statements = policy.get("Statement") or []
    if isinstance(statements, dict):
        statements = [statements]
    wanted = {caller, account, f"arn:aws:iam::{account}:root", "*"}
    for statement in statements:
        actions = statement.get("Action") or []
        actions = [actions] if isinstance(actions, str) else actions
        if statement.get("Effect") != "Allow" or not {"sts:AssumeRole", "sts:*", "*"} & set(
            actions
        ):
            continue
        principal = statement.get("Principal") or {}
        if principal == "*":
            return True
        aws = principal.get("AWS") if isinstance(principal, dict) else None
        aws = [aws] if isinstance(aws, str) else aws or []
        if wanted & set(aws):
            return True
    return False


def _assume_role(self: Any) -> Any:
    role_arn = str(self._get_param("RoleArn") or "")
    _, caller, account = self.backend.get_caller_identity(self.get_access_key(), self.region)
    iam = iam_backends[self.current_account][self.partition]
    try:
        role = iam.get_role_by_arn(role_arn)
    except Exception:
        role = None
    if role is None or not _trusts(role.assume_role_policy_document, caller, account):
        raise AccessDeniedError(caller, f"sts:AssumeRole on resource: {role_arn}")
    return original(TokenResponse, "assume_role")(self)


def _usable_key_only(name: str) -> Any:
    def call(self: KmsBackend, *args: Any, **kwargs: Any) -> Any:
        key_id = kwargs.get("key_id")
        if key_id is None and name == "decrypt":
            answer = original(KmsBackend, name)(self, *args, **kwargs)
            key_id = answer[1]  # the ARN of the key that encrypted the blob
        else:
            answer = None
        key = self.keys.get(self.any_id_to_key_id(str(key_id))) if key_id else None
        if key is not None and key.key_state == "Disabled":
            raise JsonRESTError("DisabledException", f"{key.arn} is disabled.")
        if key is not None and key.key_state == "PendingDeletion":
            raise JsonRESTError("KMSInvalidStateException", f"{key.arn} is pending deletion.")
        return answer if answer is not None else original(KmsBackend, name)(self, *args, **kwargs)

    return call
