"""The launch template's ClientToken is one per create, against the emulator, which answers
CreateLaunchTemplate tokens as EC2 documents ("Ensuring idempotency in Amazon EC2 API
requests": a repeated token returns the original result).

A template deleted outside the stack is made again by a create that Pulumi checks with no
old inputs (the refresh dropped it): that create gets a new attempt, so a new token, and a
new template, not the deleted one handed back. A template in the state keeps its attempt
(no diff reads it), and a replay of one create (the same checked inputs) sends the same
token, so EC2 answers it with the template it made."""

from __future__ import annotations

from typing import Any

import pytest

from stacks.launch_template import (
    CREATE_ATTEMPT,
    LaunchTemplateProvider,
    client_token,
    launch_template_request,
)
from tests.unit.test_stacks_launch_template import props
from tests.unit.test_stacks_providers import Aws, aws

pytestmark = pytest.mark.unit
__all__ = ["aws"]  # the fixture, used by name


def _checked(olds: dict[str, Any]) -> dict[str, Any]:
    news = props(instance_profile_arn="", security_group_ids=[])
    result = LaunchTemplateProvider().check(olds, news)
    assert not result.failures
    return dict(result.inputs)


def test_a_create_gets_its_own_attempt_and_a_template_in_the_state_keeps_its_own() -> None:
    first, second = _checked({}), _checked({})
    assert first[CREATE_ATTEMPT] and first[CREATE_ATTEMPT] != second[CREATE_ATTEMPT]
    assert client_token(first) != client_token(second)
    kept = _checked(first)
    assert kept[CREATE_ATTEMPT] == first[CREATE_ATTEMPT]
    assert launch_template_request(kept)["ClientToken"] == client_token(first)
    diff = LaunchTemplateProvider().diff("lt-1", first, kept)
    assert not diff.changes


def test_a_template_deleted_outside_the_stack_is_made_again_not_handed_back(aws: Aws) -> None:
    provider = LaunchTemplateProvider()
    inputs = _checked({})
    made = provider.create(inputs)
    # A replay of the same create (same checked inputs, same token) is the same template.
    assert provider.create(inputs).id == made.id
    aws.ec2.delete_launch_template(LaunchTemplateId=made.id)

    # The refresh dropped it; Pulumi checks the next create with no old inputs.
    again = provider.create(_checked({}))

    assert again.id != made.id
    listed = aws.ec2.describe_launch_templates(LaunchTemplateIds=[again.id])
    assert [t["LaunchTemplateId"] for t in listed["LaunchTemplates"]] == [again.id]
