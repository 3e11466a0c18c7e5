"""The policy evaluator the emulator and the IAM tests use, against the IAM User Guide's own
examples ("Policy evaluation logic", "IAM JSON policy elements: Condition operators", "Set
operators for multivalued context keys", "Grant permission to tag Amazon EC2 resources
during creation")."""

from __future__ import annotations

from typing import Any

import pytest

from devenv.emulator.policy_evaluation import (
    Decision,
    RequestContext,
    UnsupportedPolicy,
    evaluate,
)

pytestmark = pytest.mark.unit

ALLOW, EXPLICIT, IMPLICIT = Decision.ALLOW, Decision.EXPLICIT_DENY, Decision.IMPLICIT_DENY
INSTANCE = "arn:aws:ec2:us-east-1:111122223333:instance/i-0abc"


def doc(*statements: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"Version": "2012-10-17", "Statement": list(statements)}]


def allow(action: Any, resource: Any = "*", **condition: Any) -> dict[str, Any]:
    statement = {"Effect": "Allow", "Action": action, "Resource": resource}
    if condition:
        statement["Condition"] = condition
    return statement


def decide(
    policy: list[dict[str, Any]], action: str, resource: str = INSTANCE, **keys: Any
) -> Decision:
    return evaluate(policy, RequestContext(action, resource, keys))


def test_nothing_allows_is_an_implicit_deny() -> None:
    assert decide(doc(allow("ec2:DescribeInstances")), "ec2:TerminateInstances") is IMPLICIT


def test_an_explicit_deny_wins_over_any_allow() -> None:
    policy = doc(
        allow("ec2:*"),
        {"Effect": "Deny", "Action": "ec2:TerminateInstances", "Resource": INSTANCE},
    )
    assert decide(policy, "ec2:TerminateInstances") is EXPLICIT
    assert decide(policy, "ec2:StopInstances") is ALLOW


def test_actions_match_case_insensitively_and_resources_case_sensitively() -> None:
    policy = doc(
        allow("EC2:terminateinstances", "arn:aws:ec2:us-east-1:111122223333:instance/i-0*")
    )
    assert decide(policy, "ec2:TerminateInstances") is ALLOW
    assert decide(policy, "ec2:TerminateInstances", INSTANCE.replace("i-0", "I-0")) is IMPLICIT


def test_a_resource_wildcard_spans_segments_as_in_the_tag_on_create_example() -> None:
    # "Grant permission to tag Amazon EC2 resources during creation": Resource
    # "arn:aws:ec2:us-east-1:111122223333:*/*".
    policy = doc(allow("ec2:CreateTags", "arn:aws:ec2:us-east-1:111122223333:*/*"))
    assert decide(policy, "ec2:CreateTags") is ALLOW
    assert decide(policy, "ec2:CreateTags", INSTANCE.replace("111122223333", "444455556666")) is (
        IMPLICIT
    )


def test_not_action_and_not_resource() -> None:
    policy = doc({"Effect": "Allow", "NotAction": "iam:*", "NotResource": INSTANCE})
    assert decide(policy, "ec2:RunInstances", INSTANCE + "x") is ALLOW
    assert decide(policy, "ec2:RunInstances") is IMPLICIT
    assert decide(policy, "iam:PassRole", "arn:aws:iam::111122223333:role/x") is IMPLICIT


def test_the_documented_tag_on_create_example_allows_launch_tags_but_no_direct_tagging() -> None:
    # The page's first example: RunInstances on *, CreateTags only with ec2:CreateAction.
    policy = doc(
        allow("ec2:RunInstances"),
        allow(
            "ec2:CreateTags",
            "arn:aws:ec2:us-east-1:111122223333:*/*",
            StringEquals={"ec2:CreateAction": "RunInstances"},
        ),
    )
    assert decide(policy, "ec2:CreateTags", **{"ec2:CreateAction": "RunInstances"}) is ALLOW
    assert decide(policy, "ec2:CreateTags") is IMPLICIT  # a CreateTags call of its own
    assert decide(policy, "ec2:CreateTags", **{"ec2:CreateAction": "CreateVolume"}) is IMPLICIT


def test_values_of_one_key_are_ored_and_keys_and_operators_anded() -> None:
    policy = doc(
        allow(
            "ec2:RunInstances",
            StringEquals={"aws:RequestTag/env": ["dev", "test"], "aws:RequestTag/team": "ml"},
            StringLike={"aws:RequestTag/owner": "svc-*"},
        )
    )
    good = {
        "aws:RequestTag/env": "test",
        "aws:RequestTag/team": "ml",
        "aws:RequestTag/owner": "svc-a",
    }
    assert decide(policy, "ec2:RunInstances", **good) is ALLOW
    assert decide(policy, "ec2:RunInstances", **{**good, "aws:RequestTag/env": "prod"}) is IMPLICIT
    assert decide(policy, "ec2:RunInstances", **{**good, "aws:RequestTag/team": "web"}) is IMPLICIT
    assert decide(policy, "ec2:RunInstances", **{**good, "aws:RequestTag/owner": "me"}) is IMPLICIT


def test_condition_keys_are_case_insensitive_and_values_case_sensitive() -> None:
    policy = doc(allow("ec2:RunInstances", StringEquals={"aws:RequestTag/Team": "ML"}))
    assert decide(policy, "ec2:RunInstances", **{"AWS:requesttag/team": "ML"}) is ALLOW
    assert decide(policy, "ec2:RunInstances", **{"aws:RequestTag/Team": "ml"}) is IMPLICIT
    ignoring = doc(allow("ec2:RunInstances", StringEqualsIgnoreCase={"aws:RequestTag/t": "ML"}))
    assert decide(ignoring, "ec2:RunInstances", **{"aws:RequestTag/t": "ml"}) is ALLOW


def test_an_absent_key_fails_a_condition_but_passes_a_negated_one_and_if_exists() -> None:
    # "Condition operators": an absent key makes the condition false, except for negated
    # operators, ...IfExists, and Null.
    equals = doc(allow("ec2:TerminateInstances", StringEquals={"aws:ResourceTag/c": "a"}))
    assert decide(equals, "ec2:TerminateInstances") is IMPLICIT
    negated = doc(allow("ec2:TerminateInstances", StringNotEquals={"aws:ResourceTag/c": "b"}))
    assert decide(negated, "ec2:TerminateInstances") is ALLOW
    assert decide(negated, "ec2:TerminateInstances", **{"aws:ResourceTag/c": "b"}) is IMPLICIT
    if_exists = doc(
        allow("ec2:TerminateInstances", StringEqualsIfExists={"aws:ResourceTag/c": "a"})
    )
    assert decide(if_exists, "ec2:TerminateInstances") is ALLOW
    assert decide(if_exists, "ec2:TerminateInstances", **{"aws:ResourceTag/c": "z"}) is IMPLICIT


def test_null_checks_presence() -> None:
    absent = doc(allow("ec2:CreateTags", Null={"aws:TagKeys": "true"}))
    present = doc(allow("ec2:CreateTags", Null={"aws:TagKeys": "false"}))
    assert decide(absent, "ec2:CreateTags") is ALLOW
    assert decide(present, "ec2:CreateTags") is IMPLICIT
    assert decide(present, "ec2:CreateTags", **{"aws:TagKeys": ["a"]}) is ALLOW


def test_for_all_values_is_true_for_an_absent_key_as_the_guide_warns() -> None:
    # "Set operators for multivalued context keys": ForAllValues returns true when the key
    # is missing or empty; hence the Null guard the controller's policy adds.
    policy = doc(
        allow("ec2:CreateTags", **{"ForAllValues:StringEquals": {"aws:TagKeys": ["a", "b"]}})
    )
    assert decide(policy, "ec2:CreateTags") is ALLOW
    assert decide(policy, "ec2:CreateTags", **{"aws:TagKeys": ["a"]}) is ALLOW
    assert decide(policy, "ec2:CreateTags", **{"aws:TagKeys": ["a", "c"]}) is IMPLICIT


def test_for_any_value_needs_one_match_and_is_false_for_an_absent_key() -> None:
    policy = doc(allow("ec2:CreateTags", **{"ForAnyValue:StringEquals": {"aws:TagKeys": "a"}}))
    assert decide(policy, "ec2:CreateTags", **{"aws:TagKeys": ["c", "a"]}) is ALLOW
    assert decide(policy, "ec2:CreateTags", **{"aws:TagKeys": ["c"]}) is IMPLICIT
    assert decide(policy, "ec2:CreateTags") is IMPLICIT


def test_arn_like_compares_segment_by_segment() -> None:
    policy = doc(
        allow("iam:PassRole", ArnLike={"aws:SourceArn": "arn:aws:ec2:*:111122223333:instance/*"})
    )
    role = "arn:aws:iam::111122223333:role/nodes"
    assert decide(policy, "iam:PassRole", role, **{"aws:SourceArn": INSTANCE}) is ALLOW
    other = INSTANCE.replace("111122223333", "444455556666")
    assert decide(policy, "iam:PassRole", role, **{"aws:SourceArn": other}) is IMPLICIT
    assert decide(policy, "iam:PassRole", role, **{"aws:SourceArn": "not-an-arn"}) is IMPLICIT


def test_an_operator_it_does_not_model_is_refused_not_read_as_allowing() -> None:
    policy = doc(allow("ec2:RunInstances", DateGreaterThan={"aws:CurrentTime": "2020-01-01"}))
    with pytest.raises(UnsupportedPolicy, match="DateGreaterThan"):
        decide(policy, "ec2:RunInstances", **{"aws:CurrentTime": "2030-01-01"})
