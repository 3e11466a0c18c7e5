"""The gang instance set: the instances one acquisition launched, recorded in the pool's stack.

Declared by ``stacks.pool_program`` once the GangNodePool reconciler has launched a gang (the
launch itself is a direct boto3 call, DESIGN §5) and asks the driver to record it. Create
records; it does not launch: it checks that every id is a live instance tagged as this
pool's group, and fails rather than record anything else, because this resource's delete
terminates what it records. Delete is the release: the EC2 engine's own release code
(``provisioner.cloud.release``: note the secondary ENIs, terminate, wait for detach, delete
them), then a bounded wait until EC2 reports every instance terminated. So `pulumi destroy`
of a pool, and removing the set before a re-acquire, leave nothing billing.

Read reports the ids still live, so a refresh sees reality: a set whose instances are all
gone disappears from the state; a partial one shrinks, and the next update with the full
ids replaces it (N-or-0: a partial gang is released whole). A set whose instances are all
gone but whose release still has ENIs to delete (it died after terminating, and recovery
refreshes the stack) stays, with its terminated ids, so that its delete finishes that
release instead of the refresh forgetting the ENIs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    UpdateResult,
)

from provisioner.api import constants as c
from provisioner.api.clock import SystemClock
from provisioner.api.constants import FailureKind
from provisioner.cloud.release import leftover_enis, release
from provisioner.cloud.types import InstanceView
from provisioner.cloud.views import describe_by_id, describe_instances
from stacks.aws import client
from stacks.base import PoolProvider, PoolResource, diff_by_keys
from stacks.failures import PoolResourceError, as_pool_error
from stacks.spec import InstanceSetRecord

__all__ = ["InstanceSet", "InstanceSetProvider", "adopt", "belongs", "set_id"]

REPLACE_KEYS: Final = ("cluster", "pool", "group", "instance_ids", "region")
UPDATE_KEYS: Final = ("endpoint", "release_wait_seconds", "poll_seconds")
GONE_STATES: Final = ("shutting-down", "terminated")
# EC2 is eventually consistent: an id RunInstances just returned may not be describable for
# a few seconds. Recording waits this long for it before calling it missing.
VISIBLE_WAIT_SECONDS: Final = 30.0


def set_id(props: Mapping[str, Any]) -> str:
    return f"{props['pool']}/{props['group']}"


def belongs(view: InstanceView, props: Mapping[str, Any]) -> bool:
    """True when the instance carries this pool's and group's tags (set at launch)."""
    tags = view.tags
    return (
        tags.get(c.TAG_MANAGED) == "true"
        and tags.get(c.TAG_CLUSTER) == props["cluster"]
        and tags.get(c.TAG_POOL) == props["pool"]
        and tags.get(c.TAG_GROUP) == props["group"]
    )


def _describe(ec2: Any, ids: Sequence[str]) -> list[InstanceView]:
    try:
        return describe_instances(ec2, ids)
    except Exception as exc:
        raise as_pool_error(exc, "DescribeInstances of the gang") from exc


def _described(ec2: Any, ids: Sequence[str]) -> dict[str, InstanceView | None]:
    try:
        return describe_by_id(ec2, ids)
    except Exception as exc:
        raise as_pool_error(exc, "DescribeInstances of the gang") from exc


def _leftover_enis(ec2: Any, ids: Sequence[str]) -> bool:
    try:
        return bool(leftover_enis(ec2, ids))
    except Exception as exc:
        raise as_pool_error(exc, "DescribeNetworkInterfaces of the gang") from exc


def _ours(views: Sequence[InstanceView], props: Mapping[str, Any]) -> list[str]:
    return sorted(v.instance_id for v in views if belongs(v, props))


def _live_ours(views: Sequence[InstanceView], props: Mapping[str, Any]) -> list[str]:
    return _ours([v for v in views if v.state not in GONE_STATES], props)


def _wait_visible(ec2: Any, ids: Sequence[str], poll: float) -> list[InstanceView]:
    deadline = time.monotonic() + VISIBLE_WAIT_SECONDS
    while True:
        views = _describe(ec2, ids)
        if len(views) >= len(ids) or time.monotonic() >= deadline:
            return views
        time.sleep(min(poll, 1.0))


def _wait_terminated(
    ec2: Any, ids: Sequence[str], deadline: float, poll: float, terminated: Sequence[str] = ()
) -> list[str]:
    """The ids not yet terminated when EC2 says all are, or when the deadline passes;
    ``terminated``: those EC2 has already said so of (by id), asked no more."""
    remaining = [i for i in ids if i not in terminated]
    while remaining:
        remaining = [v.instance_id for v in _describe(ec2, remaining) if v.state != "terminated"]
        if not remaining or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    return remaining


class InstanceSetProvider(PoolProvider):
    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = [
            CheckFailure(key, f"{key} is required")
            for key in ("cluster", "pool", "group", "region")
            if not news.get(key)
        ]
        inputs = dict(news)
        try:
            record = InstanceSetRecord(
                str(news.get("group") or "-"), tuple(news.get("instance_ids") or ())
            )
        except ValueError as exc:
            failures.append(CheckFailure("instance_ids", str(exc)))
        else:
            inputs["instance_ids"] = list(record.instance_ids)
        return CheckResult(inputs, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # Delete before replace: the old gang is released before a new one is recorded.
        return diff_by_keys(olds, news, replace_keys=REPLACE_KEYS, update_keys=UPDATE_KEYS)

    def create(self, props: dict[str, Any]) -> CreateResult:
        ids = list(props["instance_ids"])
        views = _wait_visible(client("ec2", props), ids, float(props.get("poll_seconds") or 5))
        foreign = sorted(v.instance_id for v in views if not belongs(v, props))
        if foreign:
            raise PoolResourceError(
                "InstanceNotInPool",
                f"Instances {foreign} are not tagged as group {props['group']} of pool "
                f"{props['pool']} in cluster {props['cluster']}; the stack records only the "
                "pool's own gang, because destroying the stack terminates what it records.",
            )
        live = set(_live_ours(views, props))
        listed = {v.instance_id for v in views}
        ended = sorted(set(ids) & listed - live)
        if ended:
            raise PoolResourceError(
                "InstanceSetNotLive",
                f"Instances {ended} of pool {props['pool']} group {props['group']} are "
                "terminating; release the rest of the gang and acquire it again.",
            )
        unseen = sorted(set(ids) - listed)
        if unseen:
            # "Eventual consistency in the Amazon EC2 API": an instance a launch returned
            # may be missing from a listing for a while; that does not mean it is gone.
            # Only EC2 listing it as ended does, so the record is tried again later.
            raise PoolResourceError(
                "InstanceSetNotVisible",
                f"EC2 does not list instances {unseen} of pool {props['pool']} group "
                f"{props['group']} yet ({VISIBLE_WAIT_SECONDS:.0f} s after asking); their "
                "record is tried again.",
                kind=FailureKind.RETRYABLE,
            )
        return CreateResult(set_id(props), dict(props))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        ec2 = client("ec2", props)
        views = _describe(ec2, list(props["instance_ids"]))
        live = _live_ours(views, props)
        if live:
            return ReadResult(id_, {**props, "instance_ids": live})
        # Every instance is gone, but a release that died after terminating left ENIs to
        # delete. The set stays in the stack until its delete (that release, repeated) has
        # deleted them: read as gone, a refresh would drop it and leak them.
        ours = _ours(views, props)
        if ours and _leftover_enis(ec2, ours):
            return ReadResult(id_, {**props, "instance_ids": ours})
        return ReadResult("", {})

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult({**news, "instance_ids": list(olds["instance_ids"])})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        ec2 = client("ec2", props)
        wait = float(props.get("release_wait_seconds") or 600)
        poll = float(props.get("poll_seconds") or 5)
        deadline = time.monotonic() + wait
        # Only the pool's own instances are ever terminated, whatever the record says. Asked
        # by id, EC2's answer also shows which are terminated already (a pool's release
        # before its stack's destroy): the release and the wait below ask no more of those.
        seen = _described(ec2, list(props["instance_ids"]))
        mine = {i: v for i, v in seen.items() if v is not None and belongs(v, props)}
        ours = sorted(mine)
        done = [i for i, v in mine.items() if v.state == "terminated"]
        try:
            report = release(
                ec2, SystemClock(), ours, eni_wait_seconds=wait, poll_seconds=poll, described=seen
            )
        except Exception as exc:
            raise as_pool_error(exc, f"Release of pool {props['pool']}") from exc
        remaining = _wait_terminated(ec2, ours, deadline, poll, terminated=done)
        if remaining:
            raise PoolResourceError(
                "TerminationPending",
                f"Instances {remaining} of pool {props['pool']} were not terminated within "
                f"{wait:.0f}s; the release is retried and repeats nothing already done.",
                kind=c.FailureKind.RETRYABLE,
            )
        if not report.complete:
            raise PoolResourceError(
                "EnisPending",
                f"Network interfaces {list(report.enis_pending)} of pool {props['pool']} had "
                f"not detached within {wait:.0f}s; the release is retried and deletes them.",
                kind=c.FailureKind.RETRYABLE,
            )


def adopt(props: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The live part of a set whose recording a crash interrupted; None if none is live."""
    views = _describe(client("ec2", props), list(props.get("instance_ids") or ()))
    live = _live_ours(views, props)
    return (set_id(props), {**props, "instance_ids": live}) if live else None


class InstanceSet(PoolResource):
    provider_type = InstanceSetProvider
    adopter = adopt

    instance_ids: pulumi.Output[list[str]]
    group: pulumi.Output[str]
