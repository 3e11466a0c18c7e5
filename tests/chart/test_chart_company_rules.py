"""The chart's company rules for instances: `tags` and `rootVolume` reach the controller's
`instances` settings as written, and a tag the controller must refuse fails its start."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.api.settings_sources import SettingsError
from tests.chart.conftest import Helm, Rendered
from tests.chart.test_chart_settings import controller_settings


def test_by_default_no_extra_tags_and_the_amis_root_volume(
    rendered: Rendered, tmp_path: Path
) -> None:
    settings = controller_settings(rendered, tmp_path)
    assert settings.instances.extra_tags == {}
    assert settings.instances.root_volume is None


def test_tags_and_root_volume_reach_the_settings_as_written(helm: Helm, tmp_path: Path) -> None:
    rendered = helm.render(
        {
            "tags": {"CostCenter": "cc-4711", "team/name": "ml platform"},
            "rootVolume": {"volumeSize": "500Gi", "volumeType": "gp3", "throughput": 500},
        }
    )
    settings = controller_settings(rendered, tmp_path)
    assert settings.instances.extra_tags == {"CostCenter": "cc-4711", "team/name": "ml platform"}
    volume = settings.instances.root_volume
    assert volume is not None
    assert (volume.volume_size, volume.volume_type, volume.throughput) == (500, "gp3", 500)


def test_a_tag_on_the_controllers_own_keys_is_refused_naming_the_setting(
    helm: Helm, tmp_path: Path
) -> None:
    # Past the chart's schema, which refuses it first (test_chart_schema_refusals): the
    # controller's own check is what the schema mirrors.
    values = {"tags": {"atomic-gang.k8s.aws/pool": "other"}}
    rendered = helm.render(values, "--skip-schema-validation")
    with pytest.raises(SettingsError, match=r"instances\.extraTags"):
        controller_settings(rendered, tmp_path)
