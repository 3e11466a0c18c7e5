"""The api package's public surface, its agreement with constants, and its import rule."""

from __future__ import annotations

import subprocess
import sys
from typing import get_args

import pytest

import provisioner.api as api
from provisioner.api import constants as c
from provisioner.api.fields import AmiVariant, Mode

pytestmark = pytest.mark.unit


def test_exported_members_exist_and_are_listed_once() -> None:
    assert len(api.__all__) == len(set(api.__all__))
    for name in api.__all__:
        assert hasattr(api, name), name
    public = {n for n in vars(api) if not n.startswith("_")}
    modules = {
        "ami_policy",
        "block_duration",
        "class_purchase",
        "clock",
        "constants",
        "durations",
        "fencing",
        "fields",
        "gang_class",
        "gangnodepool",
        "kueue_objects",
        "meta",
        "nodes",
        "owners",
        "pod_fit",
        "pod_reach",
        "pod_requests",
        "problems",
        "reservation_policy",
        "settings",
        "settings_sources",
        "shape",
        "shape_rules",
        "tenancy",
        "tolerations",
        "workload",
    }
    assert public - modules == set(api.__all__)


def test_literals_match_constants() -> None:
    assert get_args(Mode) == c.MODES
    assert get_args(AmiVariant) == c.AMI_VARIANTS


def test_api_imports_no_sdk() -> None:
    code = (
        "import sys, provisioner.api, provisioner.api.settings_sources, provisioner.api.workload;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('kubernetes', 'boto3', 'botocore', 'pulumi'));"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
