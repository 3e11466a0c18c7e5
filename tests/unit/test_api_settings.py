"""Settings: defaults, validation, and the flags > env > file > defaults layering."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from provisioner.api import constants as c
from provisioner.api.settings import (
    Defaults,
    LeaderElection,
    PulumiSettings,
    Settings,
)
from provisioner.api.settings_sources import (
    SettingsError,
    build_arg_parser,
    load_settings,
    settings_from_argv,
)

pytestmark = pytest.mark.unit

ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
OTHER_ROLE = "arn:aws:iam::123456789012:role/other-node-role"
BACKEND = "s3://atomic-gang-state?region=us-east-1"


def minimal(**kw: object) -> Settings:
    base = {"region": "us-east-1", "node_role_arn": ROLE}
    pulumi = {"backend_url": BACKEND}
    return Settings.model_validate(
        {"cluster_name": "demo", "defaults": base, "pulumi": pulumi, **kw}
    )


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith(c.ENV_PREFIX):
            monkeypatch.delenv(name)


def test_defaults_are_the_chart_defaults() -> None:
    s = minimal()
    assert s.defaults.mode == "runinstances"
    assert s.defaults.keep_warm_ttl == timedelta(minutes=10)
    assert s.defaults.max_lifetime == timedelta(hours=4)
    assert s.limits.max_gang_size == 64
    assert s.limits.max_keep_warm_ttl == timedelta(hours=24)
    assert s.allowed_instance_types == ()
    assert s.allowed_node_role_arns == ()
    assert s.allowed_node_roles == (ROLE,)
    assert s.acquire_attempts_before_retry == 20
    assert s.join_deadline == timedelta(seconds=600)
    assert s.reap_interval == timedelta(seconds=120)
    assert s.instance_index_refresh == timedelta(seconds=10)
    assert s.max_concurrent_pool_reconciles == 5
    assert s.retry_backoff.initial == timedelta(seconds=5)
    assert s.retry_backoff.max == timedelta(minutes=5)
    assert s.integration_mode == c.INTEGRATION_ADMISSIONCHECK
    assert s.controller_name == c.CONTROLLER_NAME
    assert s.leader_election.enabled is True
    assert s.pulumi.secrets_provider == "passphrase"
    assert s.pulumi.backend_url == BACKEND and s.pulumi.ephemeral_state is False
    assert s.pulumi.project_name == "atomic-gang-demo"
    assert s.aws.endpoint_url is None
    assert s.iam.self_manage_instance_profile is False
    assert s.iam.manage_access_entry is False


def test_tests_can_build_the_tree_directly() -> None:
    s = Settings(
        cluster_name="demo",
        defaults=Defaults(region="eu-west-1", node_role_arn=ROLE),
        leader_election=LeaderElection(enabled=False),
        pulumi=PulumiSettings(backend_url=BACKEND),
    )
    assert s.defaults.region == "eu-west-1"
    assert s.leader_election.enabled is False


def test_pulumi_defaults_follow_state_dir_and_cluster() -> None:
    s = minimal(pulumi={"stateDir": "/data/pulumi", "ephemeralState": True})
    assert s.pulumi.backend_url == "file:///data/pulumi"
    assert s.pulumi.project_name == "atomic-gang-demo"
    # Settings dumped and read again (as tests and the chart's tooling do) stay valid.
    assert Settings.model_validate(s.model_dump()).pulumi == s.pulumi
    s = minimal(pulumi={"backendUrl": "s3://bucket/prefix", "projectName": "mine"})
    assert (s.pulumi.backend_url, s.pulumi.project_name) == ("s3://bucket/prefix", "mine")
    s = minimal(pulumi={"backendUrl": "file:///srv/stacks"})  # explicit: an option, kept
    assert s.pulumi.backend_url == "file:///srv/stacks"


@pytest.mark.parametrize(
    ("pulumi", "fragments"),
    [
        ({}, ("pulumi.backendUrl is required", "s3://", "pulumi.ephemeralState=true")),
        ({"stateDir": "/data/pulumi"}, ("pulumi.backendUrl is required",)),
        ({"ephemeralState": False}, ("pulumi.backendUrl is required",)),
        (
            {"ephemeralState": True, "backendUrl": BACKEND},
            ("pulumi.ephemeralState=true and pulumi.backendUrl=", "contradict", "unset one"),
        ),
    ],
)
def test_a_backend_is_named_or_ephemeral_state_chosen(
    pulumi: dict[str, object], fragments: tuple[str, ...]
) -> None:
    # An empty backend used to mean file://<stateDir>: one replica's disk, lost with the pod.
    with pytest.raises(ValidationError) as err:
        minimal(pulumi=pulumi)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_an_empty_backend_in_a_file_is_refused_naming_the_value(tmp_path: Path) -> None:
    bare = FILE.replace(f"pulumi:\n  backendUrl: {BACKEND}\n", "")
    with pytest.raises(SettingsError, match=r"pulumi\.backendUrl is required"):
        load_settings(write(tmp_path, bare))
    ephemeral = load_settings(write(tmp_path, bare + "pulumi:\n  ephemeralState: true\n"))
    assert ephemeral.pulumi.backend_url == f"file://{ephemeral.pulumi.state_dir}"


@pytest.mark.parametrize("mode", ["direct", "job", "Admissioncheck", ""])
def test_integration_mode_refusal_says_why(mode: str) -> None:
    with pytest.raises(ValidationError) as err:
        minimal(integration_mode=mode)
    text = str(err.value)
    assert repr(mode) in text
    assert "cannot stop their pods from being created before the nodes exist" in text
    assert "'admissioncheck'" in text


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"defaults": {"region": "us-east-1"}}, "set defaults.nodeRoleArn or allowedNodeRoleArns"),
        ({"allowed_node_role_arns": [OTHER_ROLE]}, "not in allowedNodeRoleArns"),
        ({"allowed_instance_types": ["p*.24xlarge"]}, "trailing-*"),
        ({"defaults": {"region": "us-east-1", "node_role_arn": "bob"}}, "node_role_arn"),
        ({"defaults": {"region": "US-EAST-1", "node_role_arn": ROLE}}, "region"),
        ({"defaults": {"region": "us-east-1", "node_role_arn": ROLE, "keepWarmTTL": "-1m"}}, ""),
        ({"limits": {"maxKeepWarmTTL": "5m"}}, "longer than limits.maxKeepWarmTTL"),
        ({"metrics_port": 9443}, "must differ"),
        ({"leader_election": {"renew_deadline": "20s"}}, "retryPeriod < renewDeadline"),
        ({"retryBackoff": {"initial": "10m"}}, "0 < initial <= max"),
        ({"retryBackoff": {"initial": "0s"}}, "0 < initial <= max"),
        ({"retryBackoff": {"max": "soon"}}, "retry_backoff"),
        ({"acquire_attempts_before_retry": 0}, "greater than or equal to 1"),
        # EC2 starts terminating a Capacity Block's instances 30 minutes before its end.
        ({"capacityBlockReleaseSeconds": 600}, "greater than or equal to 1800"),
        ({"cluster_name": ""}, "cluster_name"),
        ({"clusterNmae": "typo"}, "cluster_nmae"),
        ({"aws": {"endpoint_url": "localhost:5000"}}, "endpoint_url"),
    ],
)
def test_inconsistent_settings_are_refused(overrides: dict[str, object], fragment: str) -> None:
    base: dict[str, object] = {
        "cluster_name": "demo",
        "defaults": {"region": "us-east-1", "node_role_arn": ROLE},
        "pulumi": {"backend_url": BACKEND},
    }
    with pytest.raises(ValidationError) as err:
        Settings.model_validate({**base, **overrides})
    assert fragment in str(err.value) or fragment in str(err.value.errors())


def test_instance_type_allowlist_exact_and_glob() -> None:
    s = minimal(allowed_instance_types=["p4d.24xlarge", "p5.*", "g6*"])
    assert s.instance_type_allowed("p4d.24xlarge")
    assert s.instance_type_allowed("p5.48xlarge")
    assert s.instance_type_allowed("g6e.xlarge")
    assert not s.instance_type_allowed("p4de.24xlarge")
    assert not s.instance_type_allowed("p5e.48xlarge")
    assert minimal().instance_type_allowed("anything.large")


# --- layering ----------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "settings.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


FILE = f"""
clusterName: from-file
defaults:
  region: us-east-1
  nodeRoleArn: {ROLE}
  keepWarmTTL: 20m
  maxLifetime: 5h
limits:
  maxGangSize: 32
joinDeadlineSeconds: 300
pulumi:
  backendUrl: {BACKEND}
"""


def test_file_over_defaults_with_chart_spelling(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, FILE))
    assert s.cluster_name == "from-file"
    assert s.defaults.keep_warm_ttl == timedelta(minutes=20)
    assert s.limits.max_gang_size == 32
    assert s.join_deadline == timedelta(seconds=300)
    assert s.reap_interval == timedelta(seconds=120)  # default kept


def test_json_file_is_accepted(tmp_path: Path) -> None:
    body = {
        "cluster_name": "j",
        "defaults": {"region": "us-east-1", "node_role_arn": ROLE},
        "pulumi": {"backendUrl": BACKEND},
    }
    s = load_settings(write(tmp_path, json.dumps(body), "s.json"))
    assert s.cluster_name == "j"


def test_env_over_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATOMIC_GANG_DEFAULTS__KEEP_WARM_TTL", "30m")
    monkeypatch.setenv("ATOMIC_GANG_JOIN_DEADLINE_SECONDS", "400")
    monkeypatch.setenv("ATOMIC_GANG_ALLOWED_INSTANCE_TYPES", '["p5.*"]')
    monkeypatch.setenv("ATOMIC_GANG_AWS__ENDPOINT_URL", "http://127.0.0.1:5000")
    s = load_settings(write(tmp_path, FILE))
    assert s.defaults.keep_warm_ttl == timedelta(minutes=30)
    assert s.defaults.max_lifetime == timedelta(hours=5)  # file value, same section
    assert s.join_deadline == timedelta(seconds=400)
    assert s.allowed_instance_types == ("p5.*",)
    assert s.aws.endpoint_url == "http://127.0.0.1:5000"


def test_the_images_own_variables_are_not_taken_for_unknown_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The image sets both; an unknown-variable refusal here stopped the container at start.
    monkeypatch.setenv("ATOMIC_GANG_PYTHON", "/opt/venv/bin/python")
    monkeypatch.setenv("ATOMIC_GANG_LOG_FORMAT", "json")
    assert load_settings(write(tmp_path, FILE)).cluster_name
    monkeypatch.setenv("ATOMIC_GANG_LOG_FROMAT", "json")
    with pytest.raises(SettingsError, match="ATOMIC_GANG_LOG_FROMAT"):
        load_settings(write(tmp_path, FILE))


# Where the repository reads a variable of its own: `${NAME` in shell, `environ.get("NAME"`
# or `environ["NAME"` in Python.
_KNOB_READ = re.compile(r"""(?:\$\{|environ(?:\.get\(|\[)["'])(ATOMIC_GANG_[A-Z0-9_]+)""")
_REPO = Path(__file__).resolve().parents[2]


def _knobs_the_repository_reads() -> set[str]:
    found: set[str] = set()
    for folder in ("image", "devenv", "bench", "release", "tests"):
        for path in (_REPO / folder).rglob("*"):
            if path.is_file() and path.suffix in {"", ".sh", ".py"}:
                found |= set(_KNOB_READ.findall(path.read_text(errors="replace")))
    return found


def test_the_repositorys_build_and_test_knobs_are_not_taken_for_unknown_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A CI run with ATOMIC_GANG_PODMAN_FLAGS set (a fresh podman store) failed the unit
    # tests that start a CLI: the settings loader refused the image script's own variable.
    knobs = {
        name
        for name in _knobs_the_repository_reads()
        if name[len(c.ENV_PREFIX) :].split("__")[0].lower() not in Settings.model_fields
    }
    assert {"ATOMIC_GANG_PODMAN_FLAGS", "ATOMIC_GANG_IMAGE", "ATOMIC_GANG_CHAOS_SEED"} <= knobs
    for name in sorted(knobs):
        monkeypatch.setenv(name, "set-by-a-developer")
    assert load_settings(write(tmp_path, FILE)).cluster_name


def test_flags_over_env_over_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATOMIC_GANG_DEFAULTS__KEEP_WARM_TTL", "30m")
    monkeypatch.setenv("ATOMIC_GANG_CLUSTER_NAME", "from-env")
    path = write(tmp_path, FILE)
    s = settings_from_argv(
        [
            "--config",
            str(path),
            "--defaults.keep-warm-ttl",
            "45m",
            "--allowed-instance-types",
            "p4d.24xlarge, p5.*",
            "--leader-election.enabled",
            "false",
        ]
    )
    assert s.defaults.keep_warm_ttl == timedelta(minutes=45)  # flag beats env and file
    assert s.cluster_name == "from-env"  # env beats file
    assert s.limits.max_gang_size == 32  # file beats default
    assert s.allowed_instance_types == ("p4d.24xlarge", "p5.*")
    assert s.leader_election.enabled is False


def test_overrides_dict_with_dotted_keys(tmp_path: Path) -> None:
    s = load_settings(
        write(tmp_path, FILE), {"defaults.mode": "fleet", "limits": {"maxGangSize": 8}}
    )
    assert s.defaults.mode == "fleet"
    assert s.limits.max_gang_size == 8
    assert s.defaults.region == "us-east-1"


def test_unknown_env_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATOMIC_GANG_CLUSTERNAME", "typo")
    with pytest.raises(SettingsError, match="ATOMIC_GANG_CLUSTERNAME"):
        load_settings(overrides={"cluster_name": "x", "defaults.region": "us-east-1"})


def test_unknown_nested_env_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATOMIC_GANG_DEFAULTS__REGON", "us-east-1")
    with pytest.raises(SettingsError, match="regon"):
        load_settings(overrides={"cluster_name": "x", "defaults.region": "us-east-1"})


def test_bad_file_and_bad_values_raise_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")
    with pytest.raises(SettingsError, match="must hold a mapping"):
        load_settings(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(SettingsError, match=r"integration_mode: .*cannot stop their pods"):
        load_settings(write(tmp_path, FILE + "integrationMode: job\n"))


def test_parser_has_a_flag_per_setting() -> None:
    help_text = build_arg_parser("atomic-gang").format_help()
    for flag in (
        "--config",
        "--cluster-name",
        "--defaults.region",
        "--defaults.keep-warm-ttl",
        "--limits.max-gang-size",
        "--pulumi.backend-url",
        "--aws.endpoint-url",
        "--iam.self-manage-instance-profile",
        "--iam.manage-access-entry",
        "--integration-mode",
        "--webhook-port",
    ):
        assert flag in help_text


def test_stack_operation_workers_default_to_two_per_cpu_and_come_from_every_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unset, the executor is sized to the host the composition root reads, not by Settings.
    unset = minimal().stack_operations
    assert unset.workers is None
    assert unset.workers_on(cpus=3, memory_limit=None) == 6
    from_file = load_settings(write(tmp_path, FILE + "stackOperations:\n  workers: 3\n"))
    assert from_file.stack_operations.workers == 3
    monkeypatch.setenv("ATOMIC_GANG_STACK_OPERATIONS__WORKERS", "4")
    assert load_settings(write(tmp_path, FILE)).stack_operations.workers == 4
    flags = settings_from_argv(
        ["--config", str(write(tmp_path, FILE)), "--stack-operations.workers", "5"]
    )
    assert flags.stack_operations.workers == 5


@pytest.mark.parametrize(
    ("cpus", "memory_mib", "workers"),
    [
        (2, None, 4),  # no limit: two per CPU
        (2, 1024, 4),  # the chart's 1 GiB holds four beside the controller
        (16, 1024, 4),  # a large node: the memory limit, not the CPUs, decides
        (16, 4096, 24),
        (8, 8192, 16),
        (4, 256, 1),  # a limit below the controller's own share still runs one
    ],
)
def test_the_default_stack_workers_fit_the_cpus_and_the_memory_limit(
    cpus: int, memory_mib: int | None, workers: int
) -> None:
    from provisioner.api.settings import default_stack_workers

    memory = None if memory_mib is None else memory_mib * 2**20
    assert default_stack_workers(cpus, memory) == workers


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({"memory.max": "1073741824\n"}, 2**30),  # cgroup v2
        ({"memory.max": "max\n"}, None),  # v2, no limit
        ({"limit_in_bytes": "536870912\n"}, 2**29),  # cgroup v1
        ({}, None),  # not in a cgroup that says
    ],
)
def test_the_memory_limit_is_read_from_either_cgroup_version(
    tmp_path: Path, files: dict[str, str], limit: int | None
) -> None:
    from provisioner.host import memory_limit

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert memory_limit((tmp_path / "memory.max", tmp_path / "limit_in_bytes")) == limit


@pytest.mark.parametrize("workers", [0, -2])
def test_no_stack_operation_worker_is_refused_naming_the_field(
    tmp_path: Path, workers: int
) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(write(tmp_path, FILE + f"stackOperations:\n  workers: {workers}\n"))
    message = str(err.value)
    assert "stack_operations.workers:" in message
    assert f"stackOperations.workers must be at least 1 (got {workers})" in message
