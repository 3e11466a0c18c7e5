"""Every value the controller refuses at start, the chart's schema refuses at install.

Each row is a chart value, a value an installer might write, and the setting the controller
reads it as. Both halves are asserted on the same row, so the two cannot drift apart:
- the controller's own loader refuses it: the default render's settings file, with that
  setting changed as the chart would write it, read as the Deployment's flags read it;
- `helm template` with the value is refused by values.schema.json, naming the value.
Where the refused value follows from the controller's model (a minimum, a maximum, a tag
count), the row reads it from there: raising a bound in the code without the schema fails here.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import pytest
import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set
from pydantic import BaseModel
from pydantic.alias_generators import to_snake

from provisioner.api.settings import LaunchBudgetSettings, Limits, Settings
from provisioner.api.settings.instances import (
    CONTROLLER_TAGS_PER_INSTANCE,
    EC2_TAG_KEY_MAX,
    EC2_TAG_VALUE_MAX,
    EC2_TAGS_PER_RESOURCE,
    RootVolume,
)
from provisioner.api.settings.nodes import StartupTaint
from provisioner.api.settings_sources import SettingsError
from tests.chart.conftest import NODE_ROLE, Helm, Rendered
from tests.chart.test_chart_settings import controller_settings

SCHEMA_ERROR = "values don't meet the specifications of the schema"


def _bound(model: type[BaseModel], field: str, kind: str) -> int:
    """The `ge`/`le` bound (or a WholeSeconds minimum) the controller's model puts on a field."""
    for item in model.model_fields[field].metadata:
        for attr in (kind,) if kind == "le" else ("ge", "minimum"):
            if getattr(item, attr, None) is not None:
                return int(getattr(item, attr))
    raise AssertionError(f"{model.__name__}.{field} has no {kind} bound")


def below(model: type[BaseModel], field: str) -> int:
    return _bound(model, field, "ge") - 1


def above(model: type[BaseModel], field: str) -> int:
    return _bound(model, field, "le") + 1


def longest(model: type[BaseModel], field: str) -> int:
    """The `max_length` the controller's model puts on a field."""
    for item in model.model_fields[field].metadata:
        if getattr(item, "max_length", None) is not None:
            return int(item.max_length)
    raise AssertionError(f"{model.__name__}.{field} has no max_length")


@dataclass(frozen=True)
class Refused:
    value: str
    """The chart value (dotted, as --set names it)."""
    bad: Any
    setting: str = ""
    """Where the controller reads it in the settings file; empty: the same path."""
    as_written: Any = None
    """What the chart writes into the settings file, when not `bad` itself."""

    @property
    def id(self) -> str:
        return f"{self.value}={str(self.bad)[:40]}"


_TAG_ROOM = EC2_TAGS_PER_RESOURCE - CONTROLLER_TAGS_PER_INSTANCE


ROWS: list[Refused] = [
    # whole numbers, each from the controller's own minimum
    Refused("capacityBlockReleaseSeconds", below(Settings, "capacity_block_release")),
    Refused(
        "capacityBlockReleaseSeconds",
        str(below(Settings, "capacity_block_release")),
        as_written=below(Settings, "capacity_block_release"),
    ),
    Refused("reapIntervalSeconds", below(Settings, "reap_interval")),
    Refused("instanceIndexRefreshSeconds", below(Settings, "instance_index_refresh")),
    Refused("joinDeadlineSeconds", below(Settings, "join_deadline")),
    Refused("joinDeadlineSeconds", "0", as_written=0),
    Refused("acquireAttemptsBeforeRetry", below(Settings, "acquire_attempts_before_retry")),
    Refused(
        "unknownErrorAttemptsBeforeRetry",
        below(Settings, "unknown_error_attempts_before_retry"),
    ),
    Refused("maxConcurrentPoolReconciles", below(Settings, "max_concurrent_pool_reconciles")),
    Refused("limits.maxGangSize", below(Limits, "max_gang_size")),
    Refused("stackOperations.workers", 0),
    # ports
    Refused("metrics.port", below(Settings, "metrics_port"), "metricsPort"),
    Refused("health.port", above(Settings, "health_port"), "healthPort"),
    Refused("webhook.port", "70000", "webhookPort", 70000),
    # identifiers and choices
    Refused("clusterName", "-my-cluster"),
    Refused("clusterName", "c" * 101),
    Refused("controllerName", ""),
    Refused("controllerName", "c" * (longest(Settings, "controller_name") + 1)),
    Refused("integrationMode", "jobwatch"),
    Refused("defaults.region", "us_east_1"),
    Refused("defaults.nodeRoleArn", "arn:aws:iam::1234:role/short-account"),
    Refused("defaults.mode", "spot"),
    Refused("stackOperations.providerHost", "inProcess"),
    Refused("pulumi.secretsProvider", ""),
    Refused("aws.endpointUrl", "localhost:4566"),
    # durations
    Refused("defaults.keepWarmTTL", "-5m"),
    Refused("defaults.keepWarmTTL", "10 minutes"),
    Refused("defaults.keepWarmTTL", "m"),
    Refused("defaults.maxLifetime", "0s"),
    Refused("limits.maxKeepWarmTTL", "-1h"),
    Refused("limits.maxLifetime", "0"),
    Refused("stackOperations.idleStackTTL", "-1m"),
    Refused("launchBudget.share", 0),
    Refused("launchBudget.share", 1.5),
    Refused("launchBudget.requestBucket", below(LaunchBudgetSettings, "request_bucket")),
    Refused("launchBudget.requestRefillPerSecond", 0),
    Refused("launchBudget.instanceBucket", below(LaunchBudgetSettings, "instance_bucket")),
    Refused("launchBudget.instanceRefillPerSecond", -2),
    Refused("retryBackoff.initial", "0s"),
    Refused("retryBackoff.max", "-5m"),
    Refused("webhook.selfSigned.caValidity", "0h", "webhook.selfManaged.caValidity"),
    Refused("webhook.selfSigned.certValidity", "-1h", "webhook.selfManaged.certValidity"),
    Refused("webhook.selfSigned.checkInterval", "0s", "webhook.selfManaged.checkInterval"),
    # what a Job may choose
    Refused("allowedInstanceTypes", ["p5*.large"]),
    Refused("allowedNodeRoleArns", [NODE_ROLE, "role/other"]),
    Refused("amiPolicy.allowedOwners", ["amazn"]),
    Refused("amiPolicy.allowedOwners", ["12345"]),
    Refused("amiPolicy.allowedOwners", [123456789012]),
    Refused("amiPolicy.allowedImageIds", ["ami-XYZ"]),
    Refused("tenancy.sharedPools", [{"pool": "Shared_*", "namespaces": ["team-a"]}]),
    Refused("tenancy.sharedPools", [{"pool": "p" * 64, "namespaces": ["team-a"]}]),
    Refused("tenancy.sharedPools", [{"pool": "shared", "namespaces": []}]),
    Refused("tenancy.sharedPools", [{"pool": "shared", "namespaces": ["Team_A"]}]),
    # buying Capacity Blocks
    Refused("blockPurchase.maxUpfrontFeePerGang", "-5"),
    Refused("blockPurchase.maxUpfrontFeePerGang", "1600 USD"),
    Refused("blockPurchase.maxUpfrontFeePerGang", "1600.123"),
    Refused("blockPurchase.maxDuration", "0s"),
    Refused("blockPurchase.latestStart", "-1h"),
    Refused("blockPurchase.latestStart", "soon"),
    Refused("blockPurchase.purchaseSettle", "0s"),
    Refused("blockPurchase.purchaseSettle", "a while"),
    Refused("blockPurchase.instanceTypes", ["p5*.large"]),
    Refused("blockPurchase.availabilityZones", ["us_west_2a"]),
    # company rules (instances.*)
    Refused("tags", {"aws:team": "ml"}, "instances.extraTags"),
    Refused("tags", {"Team": "AWS:ml"}, "instances.extraTags"),
    Refused("tags", {"atomic-gang.k8s.aws/pool": "other"}, "instances.extraTags"),
    Refused("tags", {"kubernetes.io/cluster/other": "owned"}, "instances.extraTags"),
    Refused("tags", {"": "v"}, "instances.extraTags"),
    Refused("tags", {"k" * (EC2_TAG_KEY_MAX + 1): "v"}, "instances.extraTags"),
    Refused("tags", {"Team": "v" * (EC2_TAG_VALUE_MAX + 1)}, "instances.extraTags"),
    Refused("tags", {f"t{i}": "v" for i in range(_TAG_ROOM + 1)}, "instances.extraTags"),
    Refused("rootVolume", {"volumeType": "gp3"}, "instances.rootVolume"),
    Refused("rootVolume", {"volumeSize": below(RootVolume, "volume_size")}, "instances.rootVolume"),
    Refused("rootVolume", {"volumeSize": above(RootVolume, "volume_size")}, "instances.rootVolume"),
    Refused(
        "rootVolume",
        {"volumeSize": f"{above(RootVolume, 'volume_size')}Gi"},
        "instances.rootVolume",
    ),
    Refused("rootVolume", {"volumeSize": "200GB"}, "instances.rootVolume"),
    Refused("rootVolume", {"volumeSize": 200, "volumeType": "st1"}, "instances.rootVolume"),
    Refused("rootVolume", {"volumeSize": 200, "volumeType": "io2"}, "instances.rootVolume"),
    Refused(
        "rootVolume", {"volumeSize": 200, "volumeType": "gp2", "iops": 3000}, "instances.rootVolume"
    ),
    Refused(
        "rootVolume",
        {"volumeSize": 200, "volumeType": "io1", "iops": 3000, "throughput": 500},
        "instances.rootVolume",
    ),
    Refused(
        "rootVolume",
        {"volumeSize": 200, "iops": below(RootVolume, "iops")},
        "instances.rootVolume",
    ),
    Refused(
        "rootVolume",
        {"volumeSize": 200, "throughput": below(RootVolume, "throughput")},
        "instances.rootVolume",
    ),
    # startup taints
    Refused("startupTaints", [{"key": ""}]),
    Refused("startupTaints", [{"key": "k" * (longest(StartupTaint, "key") + 1)}]),
    Refused("startupTaints", [{"key": "example.com/not-ready", "effect": "NoRun"}]),
    Refused("startupTaints", [{"key": "example.com/not-ready", "operator": "Exists"}]),
]


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
    tree[last] = value


def _with_setting(rendered: Rendered, setting: str, value: Any) -> Rendered:
    """The render with one setting of the controller's settings file changed."""
    objects = copy.deepcopy(rendered.objects)
    config = Rendered(objects).settings()
    data = yaml.safe_load(config["data"]["settings.yaml"])
    _set(data, setting, value)
    config["data"]["settings.yaml"] = yaml.safe_dump(data)
    return Rendered(objects)


def _rows() -> Iterator[Any]:
    for row in ROWS:
        yield pytest.param(row, id=row.id)


@pytest.mark.parametrize("row", list(_rows()))
def test_what_the_controller_refuses_the_schema_refuses(
    helm: Helm, rendered: Rendered, tmp_path: Path, row: Refused
) -> None:
    written = row.bad if row.as_written is None else row.as_written
    with pytest.raises(SettingsError):
        controller_settings(_with_setting(rendered, row.setting or row.value, written), tmp_path)
    error = helm.render_error({row.value: row.bad})
    pointer = "/" + row.value.replace(".", "/")
    assert SCHEMA_ERROR in error, error
    # helm names the value by its JSON pointer; for a map's key it names the key instead.
    assert pointer in error or "invalid propertyName" in error, error


# -- rules between values ----------------------------------------------------------------
# A JSON schema cannot compare two values; the chart's templates/_validate.tpl refuses these
# at install with the sentence below, and the controller refuses the same settings at start.
@dataclass(frozen=True)
class RefusedTogether:
    values: dict[str, Any]
    words: str

    @property
    def id(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.values.items())


_SETTING = {
    "health.port": "healthPort",
    "webhook.port": "webhookPort",
    "webhook.selfSigned.certValidity": "webhook.selfManaged.certValidity",
    "webhook.selfSigned.checkInterval": "webhook.selfManaged.checkInterval",
}

TOGETHER: list[RefusedTogether] = [
    RefusedTogether({"defaults.keepWarmTTL": "25h"}, "is longer than limits.maxKeepWarmTTL 24h"),
    RefusedTogether({"defaults.keepWarmTTL": "1440m0.5s"}, "is longer than limits.maxKeep"),
    RefusedTogether({"defaults.maxLifetime": "169h"}, "is longer than limits.maxLifetime 168h"),
    RefusedTogether({"limits.maxLifetime": "2h"}, "defaults.maxLifetime 4h is longer than"),
    RefusedTogether({"retryBackoff.initial": "10m"}, "retryBackoff.initial 10m is longer than"),
    RefusedTogether({"health.port": 8080}, "metrics.port, health.port and webhook.port must"),
    RefusedTogether({"webhook.port": "8081"}, "metrics.port, health.port and webhook.port must"),
    RefusedTogether(
        {"webhook.selfSigned.certValidity": "8760h"}, "certValidity 8760h must be shorter than"
    ),
    RefusedTogether({"webhook.selfSigned.checkInterval": "73h"}, "checkInterval 73h is too long"),
]


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in TOGETHER])
def test_what_the_controller_refuses_together_the_chart_refuses(
    helm: Helm, rendered: Rendered, tmp_path: Path, row: RefusedTogether
) -> None:
    changed = rendered
    for value, bad in row.values.items():
        written = int(bad) if value.endswith(".port") else bad
        changed = _with_setting(changed, _SETTING.get(value, value), written)
    with pytest.raises(SettingsError):
        controller_settings(changed, tmp_path)
    error = helm.render_error(row.values)
    assert SCHEMA_ERROR not in error and row.words in error, error


def test_what_the_controller_takes_together_the_chart_takes(helm: Helm, tmp_path: Path) -> None:
    """The comparisons are not off by a unit: values at their limits pass both."""
    rendered = helm.render(
        {
            "defaults.keepWarmTTL": "1440m",
            "defaults.maxLifetime": "168h",
            "retryBackoff.initial": "300s",
            "webhook.selfSigned.certValidity": "8759h59m59.5s",
            "webhook.selfSigned.checkInterval": "72h",
        }
    )
    settings = controller_settings(rendered, tmp_path)
    assert settings.defaults.keep_warm_ttl == settings.limits.max_keep_warm_ttl


def test_buying_without_a_fee_cap_is_refused_naming_the_cap(
    helm: Helm, rendered: Rendered, tmp_path: Path
) -> None:
    """blockPurchase.enabled alone: the controller and the schema both ask for the cap."""
    with pytest.raises(SettingsError, match="maxUpfrontFeePerGang"):
        controller_settings(_with_setting(rendered, "blockPurchase.enabled", True), tmp_path)
    error = helm.render_error({"blockPurchase.enabled": True})
    assert SCHEMA_ERROR in error and "/blockPurchase/maxUpfrontFeePerGang" in error, error
    taken = helm.render(
        {"blockPurchase.enabled": True, "blockPurchase.maxUpfrontFeePerGang": "1600"}
    )
    policy = controller_settings(taken, tmp_path).purchase_policy("p5.48xlarge")
    assert policy.enabled and str(policy.max_upfront_fee_per_gang) == "1600"


# -- no setting the controller checks is left out ----------------------------------------
# Settings the chart writes from the release or not at all, never from a value an installer
# sets: the schema has nothing of theirs to refuse.
NOT_CHART_VALUES: dict[str, str] = {
    "leader_election": "the Deployment's flags: the Lease is named by leaderElection.leaseName "
    "or the release, in the release namespace; its timings are not offered",
    "pulumi.project_name": "not offered: atomic-gang-<clusterName>",
    "webhook.self_managed.secret_name": "the chart's own Secret",
    "webhook.self_managed.namespace": "the release namespace",
    "webhook.self_managed.webhook_configuration": "the chart's own configuration",
    "webhook.self_managed.hosts": "the chart's own Service names",
    "webhook.self_managed.renew_fraction": "not offered: 2/3",
    "ownership": "the chart's own Secret or mount path",
}


def _snake(dotted: str) -> str:
    return ".".join(to_snake(part) for part in dotted.split("."))


def _constrained(annotation: Any) -> bool:
    """A type that carries its own rule, at any depth: `tuple[RoleArn, ...]`, `RoleArn | ""`."""
    if get_origin(annotation) in (Annotated, Literal):
        return True
    return any(_constrained(arg) for arg in get_args(annotation))


def _checked_settings(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every setting (by its key in the settings file, snake_case) whose value the
    controller checks beyond its plain type: a bound, a pattern, a choice, a validator."""
    validated = {
        field
        for decorator in model.__pydantic_decorators__.field_validators.values()
        for field in decorator.info.fields
    }
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        nested = [
            a for a in get_args(field.annotation) or (field.annotation,) if isinstance(a, type)
        ]
        nested += [a for n in list(nested) for a in get_args(n)]
        sections = [a for a in nested if isinstance(a, type) and issubclass(a, BaseModel)]
        if sections:
            for section in sections:
                yield from _checked_settings(section, f"{path}.")
        elif field.metadata or name in validated or _constrained(field.annotation):
            yield path


def test_every_setting_the_controller_checks_has_a_row() -> None:
    covered = {_snake(row.setting or row.value) for row in ROWS}
    covered |= {_snake(_SETTING.get(k, k)) for row in TOGETHER for k in row.values}
    covered |= set(NOT_CHART_VALUES)
    missing = [
        path
        for path in _checked_settings(Settings)
        if not any(path == c or path.startswith(f"{c}.") for c in covered)
    ]
    assert missing == [], "add a row (or a NOT_CHART_VALUES reason) for each"
