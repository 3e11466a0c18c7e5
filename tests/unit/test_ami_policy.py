"""amiPolicy: a Job's own AMI is accepted only from owners or ids the installer allows.

The rule (`api.ami_policy`) against a table of EC2 answers; its sentences in the webhook's
refusal and at the pool's launch facts (nothing prepared or launched); the settings that
configure it; and `cloud.images` asking the emulator's DescribeImages who owns an image.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.stub import Stubber
from pydantic import ValidationError

from devenv.emulator import eks_ami_id
from provisioner.api import constants as c
from provisioner.api.ami_policy import (
    REASON_AMI_NOT_ALLOWED,
    REASON_AMI_UNVERIFIED,
    ami_problem,
)
from provisioner.api.settings import AmiPolicy, Settings
from provisioner.api.shape import GangShape
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.images import Ec2ImageOwners
from provisioner.controllers.pool.facts import gather_launch_facts
from provisioner.webhook.review import review
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_engine import FakeEngine
from tests.support.fake_images import FakeImageOwners
from tests.support.pools import pool_lookup
from tests.unit.test_cloud_helpers import REGION, World, emulated_aws
from tests.unit.test_webhook_review import GANG_ANNOTATIONS, GANG_LABELS, admission, job

pytestmark = pytest.mark.unit

EKS_AMI = "ami-0aaaaaaaaaaaaaaa1"  # Amazon's (602401143452, alias amazon)
OWN_AMI = "ami-0aaaaaaaaaaaaaaa2"  # the account's own
COMMUNITY_AMI = "ami-0aaaaaaaaaaaaaaa3"  # a public image of a stranger
PARTNER_AMI = "ami-0aaaaaaaaaaaaaaa4"  # a partner account the installer may name
MISSING_AMI = "ami-0aaaaaaaaaaaaaaa5"
STRANGER, PARTNER = "999988887777", "111122223333"


def images() -> FakeImageOwners:
    fake = FakeImageOwners()
    fake.add(EKS_AMI, "602401143452", "amazon")
    fake.add(OWN_AMI, "123456789012", None, mine=True)
    fake.add(COMMUNITY_AMI, STRANGER, None)
    fake.add(PARTNER_AMI, PARTNER, None)
    return fake


DEFAULT = AmiPolicy()


@pytest.mark.parametrize(
    ("image_id", "policy"),
    [
        pytest.param(EKS_AMI, DEFAULT, id="Amazon's image, default policy"),
        pytest.param(OWN_AMI, DEFAULT, id="the account's own image, default policy"),
        pytest.param(PARTNER_AMI, AmiPolicy(allowed_owners=(PARTNER,)), id="allowed account id"),
        pytest.param(
            COMMUNITY_AMI, AmiPolicy(allowed_image_ids=(COMMUNITY_AMI,)), id="allowed image id"
        ),
        pytest.param(
            MISSING_AMI,
            AmiPolicy(allowed_owners=(), allowed_image_ids=(MISSING_AMI,)),
            id="allowed id needs no EC2 answer",
        ),
    ],
)
def test_allowed_images_pass(image_id: str, policy: AmiPolicy) -> None:
    assert ami_problem(image_id, policy, images()) is None


@pytest.mark.parametrize(
    ("image_id", "policy", "reason", "words"),
    [
        pytest.param(
            COMMUNITY_AMI,
            DEFAULT,
            c.REASON_NOT_ALLOWED,
            [f"owned by {STRANGER}", "amiPolicy.allowedOwners (amazon, self)"],
            id="community image, default policy",
        ),
        pytest.param(
            OWN_AMI,
            AmiPolicy(allowed_owners=("amazon",)),
            c.REASON_NOT_ALLOWED,
            ["owned by 123456789012", "amiPolicy.allowedOwners (amazon)"],
            id="own image when self is not allowed",
        ),
        pytest.param(
            EKS_AMI,
            AmiPolicy(allowed_owners=(PARTNER,)),
            c.REASON_NOT_ALLOWED,
            ["owned by 602401143452 (alias amazon)"],
            id="Amazon's image when only a partner is allowed",
        ),
        pytest.param(
            MISSING_AMI,
            DEFAULT,
            c.REASON_NOT_ALLOWED,
            ["EC2 knows no such image"],
            id="no such image",
        ),
        pytest.param(
            EKS_AMI,
            AmiPolicy(allowed_owners=()),
            c.REASON_NOT_ALLOWED,
            ["amiPolicy.allowedOwners is empty"],
            id="nothing allowed",
        ),
    ],
)
def test_refusals_name_the_owner_and_the_setting(
    image_id: str, policy: AmiPolicy, reason: str, words: list[str]
) -> None:
    problem = ami_problem(image_id, policy, images())
    assert problem is not None and problem.reason == reason
    assert problem.key == c.ANN_AMI_ID and problem.value == image_id
    for word in words:
        assert word in problem.message
    assert "amiPolicy.allowedImageIds" in problem.message  # the fix an installer can make


def test_an_owner_ec2_cannot_confirm_is_refused_not_trusted() -> None:
    failing = images()
    failing.failing = "RequestLimitExceeded"
    problem = ami_problem(EKS_AMI, DEFAULT, failing)
    assert problem is not None and problem.reason == REASON_AMI_UNVERIFIED
    assert "DescribeImages could not say who owns it (RequestLimitExceeded)" in problem.message
    unchecked = ami_problem(EKS_AMI, DEFAULT, None)
    assert unchecked is not None and unchecked.reason == REASON_AMI_UNVERIFIED
    assert ami_problem(EKS_AMI, AmiPolicy(allowed_image_ids=(EKS_AMI,)), None) is None


# --- settings ------------------------------------------------------------------------------


def _settings(**extra: Any) -> Settings:
    return Settings.model_validate(
        {
            "clusterName": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {
                "region": "us-east-1",
                "nodeRoleArn": "arn:aws:iam::123456789012:role/eks-gang-node-role",
            },
            **extra,
        }
    )


def test_default_policy_is_amazon_and_self_read_from_the_charts_spelling() -> None:
    assert _settings().ami_policy == AmiPolicy(allowed_owners=("amazon", "self"))
    read = _settings(
        amiPolicy={"allowedOwners": [PARTNER, "self"], "allowedImageIds": [COMMUNITY_AMI]}
    )
    assert read.ami_policy.allowed_owners == (PARTNER, "self")
    assert read.ami_policy.allowed_image_ids == (COMMUNITY_AMI,)


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        ({"allowedOwners": ["amazn"]}, "amiPolicy.allowedOwners entries ['amazn']"),
        ({"allowedOwners": ["12345"]}, "neither 12-digit account ids"),
        ({"allowedImageIds": ["ami-xyz"]}, "amiPolicy.allowedImageIds entries ['ami-xyz']"),
        ({"allowedOwner": ["self"]}, "allowed_owner"),
    ],
)
def test_bad_policies_are_refused_at_start(policy: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as err:
        _settings(amiPolicy=policy)
    assert words in str(err.value)


# --- the webhook, at kubectl apply -------------------------------------------------------


def _verdict(image_id: str, owners: FakeImageOwners | None) -> dict[str, Any]:
    body = job(GANG_LABELS, {**GANG_ANNOTATIONS, c.ANN_AMI_ID: image_id})
    answer = review(admission(body), _settings(), pools=pool_lookup(), images=owners)
    return dict(answer["response"])


def test_webhook_refuses_a_community_ami_naming_the_setting() -> None:
    verdict = _verdict(COMMUNITY_AMI, images())
    assert verdict["allowed"] is False
    status = verdict["status"]
    assert status["code"] == 422
    assert [x["field"] for x in status["details"]["causes"]] == [
        f"metadata.annotations[{c.ANN_AMI_ID}]"
    ]
    assert status["details"]["causes"][0]["type"] == "FieldValueForbidden"
    assert f"owned by {STRANGER}" in status["message"]
    assert "amiPolicy.allowedOwners" in status["message"]


def test_webhook_admits_amazons_ami_and_fails_closed_when_ec2_does_not_answer() -> None:
    assert _verdict(EKS_AMI, images())["allowed"] is True
    down = images()
    down.failing = "UnauthorizedOperation"
    verdict = _verdict(EKS_AMI, down)
    assert verdict["allowed"] is False
    assert "DescribeImages could not say who owns it" in verdict["status"]["message"]


def test_webhook_asks_ec2_nothing_for_a_job_without_its_own_ami() -> None:
    owners = images()
    body = job(GANG_LABELS, dict(GANG_ANNOTATIONS))
    answer = review(admission(body), _settings(), pools=pool_lookup(), images=owners)
    assert answer["response"]["allowed"] is True
    assert owners.asked == []


def shape(ami_id: str) -> GangShape:
    return GangShape(
        pool="pretrain-p4d",
        count=4,
        instance_type="p4d.24xlarge",
        mode="runinstances",
        region="us-east-1",
        node_role_arn="arn:aws:iam::123456789012:role/eks-gang-node-role",
        keep_warm_ttl="10m",
        max_lifetime="4h",
        ami_variant="nvidia",
        ami_id=ami_id,
    )


# --- at the check: the pool's launch facts, before anything is prepared or launched ------


def test_pool_refuses_a_community_ami_before_any_launch() -> None:
    engine = FakeEngine()
    engine.images = images()
    with pytest.raises(CloudError) as err:
        gather_launch_facts(engine, _settings(), shape(ami_id=COMMUNITY_AMI))
    assert err.value.kind is ErrorKind.CONFIG and err.value.reason == REASON_AMI_NOT_ALLOWED
    assert "amiPolicy.allowedOwners" in str(err.value)
    assert engine.launched == []


def test_pool_waits_when_ec2_cannot_say_who_owns_the_ami() -> None:
    engine = FakeEngine()
    engine.images = images()
    engine.images.failing = "RequestLimitExceeded"
    with pytest.raises(CloudError) as err:
        gather_launch_facts(engine, _settings(), shape(ami_id=EKS_AMI))
    assert err.value.kind is ErrorKind.RETRYABLE and err.value.reason == REASON_AMI_UNVERIFIED


def test_pool_goes_on_with_an_allowed_ami() -> None:
    engine = FakeEngine()
    engine.images = images()
    facts = gather_launch_facts(engine, _settings(), shape(ami_id=EKS_AMI))
    assert engine.images.asked == [EKS_AMI] and facts.cluster is not None


# --- cloud.images against the emulator's DescribeImages ----------------------------------


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def test_ec2_says_who_owns_each_image(world: World) -> None:
    owners = Ec2ImageOwners(world.clients.ec2)
    eks = eks_ami_id(REGION, "1.33", "x86_64", "nvidia")
    record = owners.ownership(eks, ("amazon", "self"))
    assert record is not None
    assert (record.owner_id, record.owner_alias, record.allowed_as) == (
        "602401143452",
        "amazon",
        "amazon",
    )

    community = world.emu.share_public_ami(STRANGER, "handy-gpu-image")["image_id"]
    record = owners.ownership(community, ("amazon", "self"))
    assert record is not None
    assert (record.owner_id, record.owner_alias, record.allowed_as) == (STRANGER, None, None)
    record = owners.ownership(community, (STRANGER,))
    assert record is not None and record.allowed_as == STRANGER

    ec2: Any = world.clients.ec2
    launched = ec2.run_instances(ImageId=eks, MinCount=1, MaxCount=1)["Instances"][0]
    own = ec2.create_image(InstanceId=launched["InstanceId"], Name="team-image")["ImageId"]
    record = owners.ownership(own, ("amazon", "self"))
    assert record is not None and record.allowed_as == "self" and record.owner_alias is None
    assert owners.ownership(own, ("amazon",)) is not None
    assert owners.ownership(own, ("amazon",)).allowed_as is None  # type: ignore[union-attr]

    assert owners.ownership("ami-0123456789abcdef0", ("amazon", "self")) is None


def test_an_images_owner_is_read_from_ec2_once(world: World) -> None:
    owners = Ec2ImageOwners(world.clients.ec2)
    eks = eks_ami_id(REGION, "1.33", "x86_64", "nvidia")
    assert owners.ownership(eks, ("amazon",)) is not None
    # A stubber with no queued answers fails any call: the owner is not asked again.
    with Stubber(world.clients.ec2) as stub:  # type: ignore[arg-type]
        again = owners.ownership(eks, ("amazon",))
        stub.assert_no_pending_responses()
    assert again is not None and again.allowed_as == "amazon"


def test_ec2_errors_become_lookup_errors_and_are_not_kept(world: World) -> None:
    from provisioner.api.ami_policy import ImageLookupError

    owners = Ec2ImageOwners(world.clients.ec2)
    eks = eks_ami_id(REGION, "1.33", "x86_64", "nvidia")
    with Stubber(world.clients.ec2) as stub:  # type: ignore[arg-type]
        stub.add_client_error("describe_images", "RequestLimitExceeded", http_status_code=503)
        with pytest.raises(ImageLookupError, match="RequestLimitExceeded"):
            owners.ownership(eks, ("amazon",))
    record = owners.ownership(eks, ("amazon",))
    assert record is not None and record.allowed_as == "amazon"


@pytest.mark.parametrize(
    ("alias", "default_allows"),
    [pytest.param("amazon", True, id="alias amazon"), pytest.param(None, False, id="no alias")],
)
def test_eks_amis_with_or_without_the_amazon_alias(
    world: World, alias: str | None, default_allows: bool
) -> None:
    # No page shows ImageOwnerAlias on an EKS-optimized AMI itself: the emulator answers
    # either way, and the product admits it under the default only with the alias, and
    # under EKS's publishing account either way.
    world.emu.set_eks_ami_owner_alias(alias, REGION)
    eks = eks_ami_id(REGION, "1.33", "x86_64", "nvidia")
    default = ami_problem(eks, DEFAULT, Ec2ImageOwners(world.clients.ec2))
    assert (default is None) is default_allows
    if default is not None:
        assert "owned by 602401143452, which amiPolicy.allowedOwners" in default.message
    by_account = AmiPolicy(allowed_owners=("602401143452",))
    assert ami_problem(eks, by_account, Ec2ImageOwners(world.clients.ec2)) is None
