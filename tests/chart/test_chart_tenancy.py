"""The chart's `tenancy` values reach the controller's settings as the controller loads
them; by default no pool is shared."""

from __future__ import annotations

from pathlib import Path

from provisioner.api.settings import SharedPool, Tenancy
from tests.chart.conftest import Helm, Rendered
from tests.chart.test_chart_settings import controller_settings


def test_by_default_no_pool_is_shared(rendered: Rendered, tmp_path: Path) -> None:
    assert controller_settings(rendered, tmp_path).tenancy == Tenancy()


def test_shared_pools_reach_the_settings(helm: Helm, tmp_path: Path) -> None:
    shared = [{"pool": "shared-*", "namespaces": ["team-a", "team-b"]}]
    settings = controller_settings(helm.render({"tenancy.sharedPools": shared}), tmp_path)
    assert settings.tenancy.shared_pools == (
        SharedPool(pool="shared-*", namespaces=("team-a", "team-b")),
    )
    assert settings.tenancy.may_share("shared-p5", "team-b")
