"""The stack driver's drift repair (``pulumi_driver.drift``), against a fake stack: when an
`up` meets a resource of the stack gone from AWS it refreshes once and runs again; never a
second refresh in one operation; a failure of another kind is not a reason to refresh.
And the engine events of a real refresh are read for what it dropped."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from pulumi.automation import EngineEvent

from provisioner.api.constants import FailureKind
from provisioner.pulumi_driver import oplog
from provisioner.pulumi_driver.drift import DroppedResource, up_repairing
from provisioner.pulumi_driver.engine_log import EngineLog
from provisioner.pulumi_driver.errors import StackError
from provisioner.pulumi_driver.reports import StackResult

TEMPLATE_GONE = StackError(
    "LaunchTemplateNotFound",
    "New version of launch template lt-old failed (InvalidLaunchTemplateId.NotFound).",
    kind=FailureKind.CONFIG,
    pool="pool-a",
    operation="prepare",
)
LOCKED = StackError("StackLocked", "locked", kind=FailureKind.RETRYABLE, operation="prepare")


class FakeStack:
    """The AWS side of one stack: `up` fails with the queued errors, then makes the
    template as `lt-new`; `refresh` reports what it dropped."""

    def __init__(self, failures: Sequence[StackError], dropped: Sequence[DroppedResource]) -> None:
        self.failures = list(failures)
        self.dropped = list(dropped)
        self.calls: list[str] = []

    def up(self) -> StackResult:
        self.calls.append("up")
        if self.failures:
            raise self.failures.pop(0)
        outputs: Any = type(
            "Outputs", (), {"launch_template_id": "lt-new", "placement_group_name": "pg-a"}
        )()
        op = oplog.StackOperation("pool-a", "prepare", datetime.now(UTC), "host", 1)
        return StackResult(op, outputs)

    def refresh(self) -> list[DroppedResource]:
        self.calls.append("refresh")
        return self.dropped


def _run(stack: FakeStack, *, refresh_first: bool = False, held: bool = True) -> StackResult:
    return up_repairing(stack.up, stack.refresh, refresh_first=refresh_first, held_anything=held)


def test_an_up_that_meets_its_template_gone_refreshes_once_and_runs_again() -> None:
    stack = FakeStack([TEMPLATE_GONE], [DroppedResource("launch-template", "lt-old")])
    result = _run(stack)
    assert stack.calls == ["up", "refresh", "up"]
    assert result.repairs == (
        "launch template lt-old was deleted outside the stack; recreated as lt-new",
    )


def test_a_second_miss_is_raised_with_a_true_message_and_no_second_refresh() -> None:
    stack = FakeStack(
        [TEMPLATE_GONE, TEMPLATE_GONE], [DroppedResource("launch-template", "lt-old")]
    )
    with pytest.raises(StackError) as raised:
        _run(stack)
    assert stack.calls == ["up", "refresh", "up"]
    assert raised.value.reason == "LaunchTemplateNotFound"
    assert raised.value.kind is FailureKind.CONFIG
    assert "refreshed once (dropping launch-template lt-old)" in raised.value.message


def test_a_failure_of_another_kind_is_not_repaired() -> None:
    stack = FakeStack([LOCKED], [])
    with pytest.raises(StackError) as raised:
        _run(stack)
    assert raised.value is LOCKED
    assert stack.calls == ["up"]


def test_a_stack_that_held_nothing_has_nothing_to_repair() -> None:
    # A first prepare whose template cannot be made is a configuration failure as it is.
    stack = FakeStack([TEMPLATE_GONE], [])
    with pytest.raises(StackError):
        _run(stack, held=False)
    assert stack.calls == ["up"]


def test_refresh_first_refreshes_before_the_up_and_only_once() -> None:
    stack = FakeStack([], [DroppedResource("placement-group", "pg-a")])
    result = _run(stack, refresh_first=True)
    assert stack.calls == ["refresh", "up"]
    assert result.repairs == ("placement group pg-a was deleted outside the stack; recreated",)

    again = FakeStack([TEMPLATE_GONE], [])
    with pytest.raises(StackError) as raised:
        _run(again, refresh_first=True)
    assert again.calls == ["refresh", "up"]
    assert "finding nothing gone" in raised.value.message


def test_an_up_with_nothing_gone_is_one_up() -> None:
    stack = FakeStack([], [])
    assert _run(stack).repairs == ()
    assert stack.calls == ["up"]


def _outputs_event(op: str, urn: str, old_id: str | None, new_id: str | None) -> EngineEvent:
    def state(rid: str) -> dict[str, Any]:
        return {"type": "t", "urn": urn, "id": rid, "parent": "", "provider": "", "custom": True}

    metadata: dict[str, Any] = {"op": op, "urn": urn, "type": "t", "provider": ""}
    if old_id is not None:
        metadata["old"] = state(old_id)
    if new_id is not None:
        metadata["new"] = state(new_id)
    return EngineEvent.from_json(
        {"sequence": 1, "timestamp": 0, "resOutputsEvent": {"metadata": metadata}}
    )


def test_the_engine_log_keeps_what_a_refresh_found_gone() -> None:
    # As the CLI reports a refresh: a resource whose read found nothing ends as a "delete"
    # step with no new state; one that still exists as "same".
    events = EngineLog(logging.getLogger("t"), "pool-a", "refresh")
    prefix = "urn:pulumi:pool-a::p::pulumi-python:dynamic/atomicgang:"
    events.on_event(
        _outputs_event("delete", prefix + "LaunchTemplate::launch-template", "lt-1", None)
    )
    events.on_event(_outputs_event("same", prefix + "PlacementGroup::placement-group", "pg", "pg"))
    # The root stack resource has no id before or after: never taken for gone.
    root = "urn:pulumi:pool-a::p::pulumi:pulumi:Stack::p-pool-a"
    events.on_event(_outputs_event("same", root, "", ""))
    assert events.dropped == [("launch-template", "lt-1")]
    # In an `up`, a delete is the stack's own, not drift.
    up = EngineLog(logging.getLogger("t"), "pool-a", "remove")
    up.on_event(_outputs_event("delete", prefix + "InstanceSet::instance-set", "set", None))
    assert up.dropped == []
