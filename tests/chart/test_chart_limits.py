"""What a Job may choose, as the chart sets it: limits.maxLifetime, amiPolicy and the
instance-type allowlist reach the controller's settings, with safe defaults, and a bad entry
fails the render naming the value."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.chart.conftest import Helm, Rendered
from tests.chart.test_chart_settings import controller_settings

ACCELERATORS = (
    "p4d.*",
    "p4de.*",
    "p5.*",
    "p5e.*",
    "p5en.*",
    "p6-b200.*",
    "g5.*",
    "g6.*",
    "g6e.*",
    "trn1.*",
    "trn1n.*",
    "trn2.*",
    "inf2.*",
)


def test_defaults_bound_what_a_job_may_choose(rendered: Rendered, tmp_path: Path) -> None:
    settings = controller_settings(rendered, tmp_path)
    assert settings.limits.max_lifetime == timedelta(hours=168)
    assert settings.ami_policy.allowed_owners == ("amazon", "self")
    assert settings.ami_policy.allowed_image_ids == ()
    assert settings.allowed_instance_types == ACCELERATORS
    assert settings.instance_type_allowed("p5.48xlarge")
    assert settings.instance_type_allowed("trn2.48xlarge")
    assert not settings.instance_type_allowed("m5.large")
    assert not settings.instance_type_allowed("x2iedn.32xlarge")


def test_installer_values_reach_the_settings(helm: Helm, tmp_path: Path) -> None:
    rendered = helm.render(
        {
            "limits.maxLifetime": "720h",
            "amiPolicy.allowedOwners": ["602401143452", "self"],
            "amiPolicy.allowedImageIds": ["ami-0123456789abcdef0"],
            "allowedInstanceTypes": ["p5.48xlarge"],
        }
    )
    settings = controller_settings(rendered, tmp_path)
    assert settings.limits.max_lifetime == timedelta(hours=720)
    assert settings.ami_policy.allowed_owners == ("602401143452", "self")
    assert settings.ami_policy.allowed_image_ids == ("ami-0123456789abcdef0",)
    assert settings.allowed_instance_types == ("p5.48xlarge",)


def test_empty_lists_stay_empty(helm: Helm, tmp_path: Path) -> None:
    # allowedOwners: [] allows no owner (only listed ids); allowedInstanceTypes: [] any type.
    rendered = helm.render({"amiPolicy.allowedOwners": [], "allowedInstanceTypes": []})
    settings = controller_settings(rendered, tmp_path)
    assert settings.ami_policy.allowed_owners == ()
    assert settings.allowed_instance_types == ()


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"amiPolicy.allowedOwners": ["amazn"]}, "at '/amiPolicy/allowedOwners/0'"),
        ({"amiPolicy.allowedOwners": ["12345"]}, "at '/amiPolicy/allowedOwners/0'"),
        ({"amiPolicy.allowedImageIds": ["ami-XYZ"]}, "'ami-XYZ' does not match pattern"),
        ({"allowedInstanceTypes": ["p5*.large"]}, "'p5*.large' does not match pattern"),
    ],
)
def test_a_bad_entry_fails_the_render_naming_the_value(
    helm: Helm, values: dict[str, object], words: str
) -> None:
    assert words in helm.render_error(values)
