"""Who is calling the emulator, as IAM knows them: the caller's id, ARN and account, and
the identity policies `authorization` evaluates (an IAM user's inline and attached policies
and its groups'; an assumed role's). A caller moto knows as neither is the account's root,
which no identity policy limits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from moto.iam.models import iam_backends
from moto.sts.models import sts_backends

from devenv.emulator.accounting import access_key


def caller(response: Any) -> tuple[str, str, str, list[Any] | None]:
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
