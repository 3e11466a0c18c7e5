"""The command line as an operator meets it: --version, one-line errors when no cluster can
be reached, the JSON documents of doctor, explain and pools, and the kubectl plugin.

The error cases run the real `python -m provisioner` in a child process with an empty home,
so what is checked is exactly what a terminal shows: one line on stderr, no traceback, a
non-zero exit code.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from provisioner.commands import cli
from provisioner.commands.checks import Result, report_json
from provisioner.commands.explain import render
from provisioner.commands.pools import PoolRow, render_json

ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provisioner", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.fixture
def bare_env(tmp_path: Path) -> dict[str, str]:
    """No kubeconfig anywhere and not in a pod: an empty HOME, no KUBECONFIG, no service
    host."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "KUBERNETES_"))}
    env["HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _one_line_error(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode == cli.EXIT_CANNOT_RUN, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["doctor"],
        ["explain", "default/train"],
        ["pools"],
        ["drain"],
        ["controller", "--config", "{settings}"],
    ],
    ids=["doctor", "explain", "pools", "drain", "controller"],
)
def test_a_missing_kubeconfig_is_one_line_and_a_non_zero_exit(
    argv: list[str], bare_env: dict[str, str], tmp_path: Path
) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        json.dumps(
            {
                "clusterName": "demo",
                "defaults": {
                    "region": "us-east-1",
                    "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes",
                },
                "pulumi": {"ephemeralState": True},
            }
        )
    )
    argv = [a.format(settings=settings) for a in argv]
    missing = tmp_path / "nowhere" / "kubeconfig"
    done = _run(*argv, "--kubeconfig", str(missing), env=bare_env, cwd=tmp_path)
    _one_line_error(done, str(missing), "does not exist", "--kubeconfig")


def test_doctor_with_no_kubeconfig_anywhere_is_one_line(
    bare_env: dict[str, str], tmp_path: Path
) -> None:
    done = _run("doctor", env=bare_env, cwd=tmp_path)
    _one_line_error(done, "no kubeconfig", "not running in a cluster", "--kubeconfig")


def test_a_kubeconfig_env_naming_a_missing_file_is_named(
    bare_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**bare_env, "KUBECONFIG": str(tmp_path / "gone.yaml")}
    done = _run("doctor", env=env, cwd=tmp_path)
    _one_line_error(done, "KUBECONFIG", "gone.yaml", "does not exist")


def test_an_api_server_that_does_not_answer_is_one_line(
    bare_env: dict[str, str], tmp_path: Path
) -> None:
    # Port 1 on loopback: nothing listens, the connection is refused at once.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    done = _run(
        "explain", "default/train", "--kubeconfig", str(kubeconfig), env=bare_env, cwd=tmp_path
    )
    _one_line_error(done, "could not be read", str(kubeconfig))


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out == f"atomic-gang {cli.version()}"
    assert out.split()[-1][0].isdigit(), out


def test_the_kubectl_plugin_entry_point_exists_and_runs_the_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    # kubectl runs `kubectl-atomic_gang` for `kubectl atomic-gang`.
    target = scripts["kubectl-atomic_gang"]
    module, _, function = target.partition(":")
    entry = getattr(importlib.import_module(module), function)
    monkeypatch.setattr(sys, "argv", ["kubectl-atomic_gang", "--version"])
    with pytest.raises(SystemExit) as exited:
        entry()
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"kubectl atomic-gang {cli.version()}"
    monkeypatch.setattr(sys, "argv", ["kubectl-atomic_gang", "doctor", "--help"])
    with pytest.raises(SystemExit):
        entry()
    assert "usage: kubectl atomic-gang doctor" in capsys.readouterr().out


def test_doctor_json_is_one_document_with_every_check() -> None:
    results = [
        Result("LocalQueue (team-a/gpu)", True, "team-a/gpu -> ClusterQueue cq"),
        Result("ClusterQueue covers pending requests (team-a/gpu)", False, "no gpu", "add it"),
        Result("cert-manager", True, "not needed", "use selfSigned", warn=True),
    ]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = report_json(results, "settings: file x; cluster: y")
    assert code == 1
    document = json.loads(out.getvalue())
    assert document["target"] == "settings: file x; cluster: y"
    assert document["summary"] == {"passed": 1, "warned": 1, "failed": 1}
    assert [c["name"] for c in document["checks"]] == [r.name for r in results]
    assert document["checks"][1] == {
        "name": "ClusterQueue covers pending requests (team-a/gpu)",
        "ok": False,
        "warn": False,
        "detail": "no gpu",
        "fix": "add it",
    }


def test_explain_json() -> None:
    lines = ["Job ns/a waits for quota", "Workload w: quota not reserved, not admitted."]
    document = json.loads(render("ns/a", "atomic-gang-check", "settings: x", lines, "json"))
    assert document == {
        "job": "ns/a",
        "kind": None,
        "check": "atomic-gang-check",
        "target": "settings: x",
        "verdict": lines[0],
        "details": lines[1:],
    }
    assert render("ns/a", "c", "h", lines, "text").splitlines() == ["h; check c", *lines]


def test_pools_json() -> None:
    rows = [PoolRow("p", "Satisfied", ("i-1", "i-2"), "ok, 5 resources", "up succeeded")]
    assert json.loads(render_json(rows)) == [
        {
            "pool": "p",
            "phase": "Satisfied",
            "instances": ["i-1", "i-2"],
            "stack": "ok, 5 resources",
            "last_operation": "up succeeded",
            "namespace": "-",
            "instance_type": "-",
            "count": "-",
            "ready": "-",
        }
    ]


def test_output_json_is_accepted_by_doctor_explain_and_pools() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["doctor", "-o", "json"]).output == "json"
    assert parser.parse_args(["explain", "ns/j", "--output", "json"]).output == "json"
    assert parser.parse_args(["doctor"]).queue is None
    from provisioner.commands.pools import build_parser as pools_parser

    assert pools_parser().parse_args(["-o", "json"]).output == "json"
