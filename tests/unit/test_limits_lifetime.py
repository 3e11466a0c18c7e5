"""limits.maxLifetime: a Job cannot opt out of the reaper's backstop with a huge max-lifetime.

The shape parser refuses at the webhook and at the admission check alike (both run it).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShapeError, parse_gang_shape
from provisioner.webhook.review import review
from tests.support.backends import UNREACHED_BACKEND
from tests.support.pools import pool_lookup
from tests.unit.test_webhook_review import GANG_ANNOTATIONS, GANG_LABELS, admission, job

pytestmark = pytest.mark.unit

ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
LABELS = {c.POOL_LABEL: "pretrain-p4d", c.QUEUE_NAME_LABEL: "gang-queue"}
BASE = {c.ANN_COUNT: "4", c.ANN_INSTANCE_TYPE: "p4d.24xlarge"}


def settings(**extra: Any) -> Settings:
    defaults = {"region": "us-east-1", "nodeRoleArn": ROLE, **extra.pop("defaults", {})}
    return Settings.model_validate(
        {"clusterName": "demo", "pulumi": UNREACHED_BACKEND, "defaults": defaults, **extra}
    )


def refusal(lifetime: str, s: Settings) -> str:
    with pytest.raises(GangShapeError) as err:
        parse_gang_shape(LABELS, {**BASE, c.ANN_MAX_LIFETIME: lifetime}, 4, s)
    (problem,) = err.value.problems
    assert problem.key == c.ANN_MAX_LIFETIME and problem.reason == c.REASON_EXCEEDS_LIMIT
    return problem.message


def test_default_limit_is_a_week_and_a_lifetime_at_it_is_kept() -> None:
    assert settings().limits.max_lifetime == timedelta(hours=168)
    for lifetime, expected in (("168h", timedelta(hours=168)), ("90m", timedelta(minutes=90))):
        shape = parse_gang_shape(LABELS, {**BASE, c.ANN_MAX_LIFETIME: lifetime}, 4, settings())
        assert shape.max_lifetime == expected


@pytest.mark.parametrize("lifetime", ["876000h", "168h0m1s", "169h"])
def test_a_lifetime_above_the_limit_is_refused_naming_annotation_limit_and_setting(
    lifetime: str,
) -> None:
    message = refusal(lifetime, settings())
    assert message.startswith(f'Annotation {c.ANN_MAX_LIFETIME} is "{lifetime}"')
    assert "at most 168h0m0s (limits.maxLifetime" in message
    assert "up to 168h0m0s" in message


def test_the_installer_sets_the_limit() -> None:
    raised = settings(limits={"maxLifetime": "720h"})
    shape = parse_gang_shape(LABELS, {**BASE, c.ANN_MAX_LIFETIME: "700h"}, 4, raised)
    assert shape.max_lifetime == timedelta(hours=700)
    lowered = settings(limits={"maxLifetime": "8h"})
    assert "at most 8h0m0s (limits.maxLifetime" in refusal("9h", lowered)


def test_a_default_lifetime_above_the_limit_is_refused_at_start() -> None:
    with pytest.raises(ValidationError, match=r"defaults\.maxLifetime is longer than limits"):
        settings(defaults={"maxLifetime": "9h"}, limits={"maxLifetime": "8h"})


def test_webhook_refuses_a_lifetime_above_the_limit() -> None:
    body = job(GANG_LABELS, {**GANG_ANNOTATIONS, c.ANN_MAX_LIFETIME: "876000h"})
    verdict = review(admission(body), settings(), pools=pool_lookup())["response"]
    assert verdict["allowed"] is False
    (cause,) = verdict["status"]["details"]["causes"]
    assert cause["field"] == f"metadata.annotations[{c.ANN_MAX_LIFETIME}]"
    assert "limits.maxLifetime" in cause["message"]
