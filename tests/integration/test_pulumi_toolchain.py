"""The Pulumi CLI we build runs Automation API inline programs with Python dynamic providers.

Real CLI, `file://` backend in a temp dir, passphrase secrets, our own
`pulumi-resource-pulumi-python` launcher, and a dynamic resource calling the EC2 emulator
through boto3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from pulumi import automation as auto

from devenv.pulumi_probe import program

PROJECT = "atomic-gang-toolchain"


@pytest.fixture
def pulumi_env(tmp_path: Path, pulumi_tool: Any) -> dict[str, str]:
    backend = tmp_path / "state"
    backend.mkdir()
    return {
        "PULUMI_BACKEND_URL": f"file://{backend}",
        "PULUMI_CONFIG_PASSPHRASE": "toolchain-test",
        "PULUMI_HOME": str(tmp_path / "pulumi-home"),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        # The installer put our dynamic-provider launcher next to the CLI; it must run the
        # provider host on this interpreter, and nothing from PATH may stand in for it.
        "ATOMIC_GANG_PYTHON": sys.executable,
        "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }


def test_inline_program_with_boto3_dynamic_resource_up_outputs_destroy(
    tmp_path: Path, pulumi_tool: Any, pulumi_env: dict[str, str], emulator: Any
) -> None:
    (tmp_path / "work").mkdir()
    command = auto.PulumiCommand(root=str(pulumi_tool.binary.parent.parent))
    assert command.version is not None and str(command.version) == "3.260.0"
    stack = auto.create_or_select_stack(
        stack_name="probe",
        project_name=PROJECT,
        program=program("us-east-1", emulator.endpoint_url),
        opts=auto.LocalWorkspaceOptions(
            work_dir=str(tmp_path / "work"),
            env_vars=pulumi_env,
            secrets_provider="passphrase",
            pulumi_command=command,
            project_settings=auto.ProjectSettings(
                name=PROJECT,
                runtime="python",
                backend=auto.ProjectBackend(url=pulumi_env["PULUMI_BACKEND_URL"]),
            ),
        ),
    )
    output: list[str] = []
    up = stack.up(on_output=output.append)
    assert up.summary.result == "succeeded"
    assert not any("from $PATH" in line for line in output), output
    group_id = up.outputs["groupId"].value
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=emulator.endpoint_url)
    groups = ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"]
    assert groups[0]["GroupName"] == "atomic-gang-probe"

    listed = subprocess.run(
        [str(pulumi_tool.binary), "stack", "ls", "--project", PROJECT, "--json"],
        env={**os.environ, **pulumi_env},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    names = [entry["name"] for entry in json.loads(listed.stdout)]
    assert any(name.endswith("probe") for name in names), names

    down = stack.destroy(on_output=lambda _line: None)
    assert down.summary.result == "succeeded"
    remaining = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": ["atomic-gang-probe"]}]
    )["SecurityGroups"]
    assert remaining == []
    stack.workspace.remove_stack("probe")
    listed = subprocess.run(
        [str(pulumi_tool.binary), "stack", "ls", "--project", PROJECT, "--json"],
        env={**os.environ, **pulumi_env},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert json.loads(listed.stdout) == []


def test_the_cli_built_with_lazy_word_lists_still_judges_secrets_by_them(
    tmp_path: Path, pulumi_tool: Any, pulumi_env: dict[str, str]
) -> None:
    """`patches.LAZY_WORD_LISTS` defers zxcvbn's word lists to first use; `config set`'s
    secret check must still read them. A dictionary phrase passes only if they are loaded:
    scored as 16 random lowercase letters (75 bits) it would look like a secret."""
    work = tmp_path / "project"
    work.mkdir()
    (work / "Pulumi.yaml").write_text("name: lazy-lists\nruntime: yaml\n")
    env = {**os.environ, **pulumi_env}

    def pulumi(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(pulumi_tool.binary), *args, "--non-interactive"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert pulumi("stack", "init", "dev").returncode == 0
    random = pulumi("config", "set", "dbPassword", "x8#Kq2!zR7@vLm4$")
    assert random.returncode != 0 and "looks like a secret" in random.stderr
    phrase = pulumi("config", "set", "dbPassword", "correcthorsebatt")
    assert phrase.returncode == 0, phrase.stderr
