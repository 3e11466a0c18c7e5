"""The command line's flags as kubectl users read them: -n, --context, --kubeconfig,
--controller-namespace, -o, the forms `explain` takes, and the exit codes.

Parsing only: nothing here reaches a cluster (the usage errors are found before connecting).
The real kubectl running the plugin is `tests/integration/test_kubectl_plugin.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner.commands import cli
from provisioner.commands.drain import build_parser as drain_parser
from provisioner.commands.explain import TargetError, parse_target
from provisioner.commands.kubectl_flags import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from provisioner.commands.pools import build_parser as pools_parser
from provisioner.kube.connect import default_namespace

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("words", "namespace", "parsed"),
    [
        # kubectl's forms: the namespace is -n's (None: the context's, filled in later).
        (["job/x"], "team-a", ("team-a", "job", "x")),
        (["job/x"], None, (None, "job", "x")),
        (["jobs.batch/x"], None, (None, "jobs.batch", "x")),
        (["JobSet/x"], "team-a", ("team-a", "JobSet", "x")),
        (["pytorchjob", "x"], "team-a", ("team-a", "pytorchjob", "x")),
        (["x"], "team-a", ("team-a", None, "x")),
        (["x"], None, (None, None, "x")),
        # The first releases' forms, documented in the README, still work.
        (["team-a/x"], None, ("team-a", None, "x")),
        (["team-a/jobset/x"], None, ("team-a", "jobset", "x")),
        (["team-a/x"], "team-a", ("team-a", None, "x")),
    ],
)
def test_explain_reads_kubectls_forms_and_the_old_ones(
    words: list[str], namespace: str | None, parsed: tuple[str | None, str | None, str]
) -> None:
    assert parse_target(words, namespace) == parsed


@pytest.mark.parametrize(
    ("words", "namespace", "says"),
    [
        # The example: a namespace in the name that -n contradicts.
        (["default/job"], "team-a", "namespace default but -n says team-a"),
        (["team-b/jobset/x"], "team-a", "-n says team-a"),
        (["deployment", "x"], None, "'deployment' is not a kind"),
        (["job", "a/b"], None, "holds no '/'"),
        (["a", "b", "c"], None, "one object"),
        (["a/"], None, "names no object"),
        (["a/b/c/d"], None, "names no object"),
    ],
)
def test_words_that_name_no_one_object_are_a_usage_error(
    words: list[str], namespace: str | None, says: str
) -> None:
    with pytest.raises(TargetError, match=says):
        parse_target(words, namespace)


def test_n_and_context_go_before_or_after_the_object() -> None:
    parser = cli.build_parser("kubectl atomic-gang")
    before = parser.parse_args(["explain", "-n", "team-a", "job/x", "--context", "c", "-o", "yaml"])
    after = parser.parse_args(["explain", "job/x", "-n", "team-a", "--context=c", "-oyaml"])
    for args in (before, after):
        assert (args.job, args.namespace, args.context, args.output) == (
            ["job/x"],
            "team-a",
            "c",
            "yaml",
        )
        where = cli._where(args)
        assert (where.context, where.controller_namespace) == ("c", None)


def test_the_controllers_namespace_has_its_own_flag() -> None:
    args = cli.build_parser().parse_args(
        ["doctor", "-n", "team-a", "--controller-namespace", "platform", "--kubeconfig", "k"]
    )
    where = cli._where(args)
    assert (where.controller_namespace, where.kubeconfig, args.namespace) == (
        "platform",
        "k",
        "team-a",
    )
    pools = pools_parser().parse_args(["-n", "team-a", "--controller-namespace", "platform"])
    assert (pools.namespace, pools.controller_namespace) == ("team-a", "platform")
    drain = drain_parser().parse_args(["--controller-namespace", "platform", "--context", "c"])
    assert (drain.controller_namespace, drain.context) == ("platform", "c")


def test_doctor_queue_a_bare_name_is_in_ns() -> None:
    parser = cli.build_parser()
    assert cli._queue(parser.parse_args(["doctor", "-n", "team-a", "--queue", "gpu"])) == (
        "team-a/gpu"
    )
    assert cli._queue(parser.parse_args(["doctor", "--queue", "b/gpu", "-n", "a"])) == "b/gpu"
    assert cli._queue(parser.parse_args(["doctor"])) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["explain", "job/x", "-o", "xml"],
        ["doctor", "-o", "table"],
        ["explain"],
        ["pools", "-o", "text"],
        ["drain", "-n", "team-a"],
        # No cluster is asked: the words contradict each other.
        ["explain", "default/job", "-n", "team-a", "--kubeconfig", "/nonexistent"],
    ],
)
def test_usage_errors_exit_2_before_reaching_a_cluster(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "usage:" in err and "Traceback" not in err


def test_drain_refuses_n_naming_the_flag_it_meant(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["drain", "--namespace", "atomic-gang-system"])
    assert "--controller-namespace" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["explain", "--help"], ["doctor", "--help"]])
def test_help_documents_the_exit_codes_and_the_flags(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv, prog="kubectl atomic-gang")
    assert exited.value.code == EXIT_OK
    out = " ".join(capsys.readouterr().out.split())
    assert "exit codes: 0 ok; 1 an error" in out and "2 a usage error" in out
    assert "usage: kubectl atomic-gang" in out
    if argv != ["--help"]:
        for flag in ("-n NS, --namespace NS", "--context NAME", "--controller-namespace NS"):
            assert flag in out, flag
        assert "{text,wide,json,yaml}" in out


@pytest.mark.parametrize("command", ["pools", "drain"])
def test_pools_and_drain_help_under_the_plugins_name(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([command, "--help"], prog="kubectl atomic-gang")
    assert exited.value.code == EXIT_OK
    out = " ".join(capsys.readouterr().out.split())
    assert f"usage: kubectl atomic-gang {command}" in out
    assert "exit codes:" in out and "--context NAME" in out and "no Pulumi CLI needed" in out


def _kubeconfig(path: Path, current: str) -> Path:
    def context(name: str, **extra: str) -> dict[str, object]:
        return {"name": name, "context": {"cluster": "k", "user": "u", **extra}}

    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [context("c", namespace="team-b"), context("bare")],
                "current-context": current,
            }
        )
    )
    return path


def test_without_n_the_namespace_is_the_contexts_as_in_kubectl(tmp_path: Path) -> None:
    kubeconfig = str(_kubeconfig(tmp_path / "config", current="bare"))
    assert default_namespace(kubeconfig, "c") == "team-b"
    assert default_namespace(kubeconfig, None) == "default"  # the current context has none
    current_c = str(_kubeconfig(tmp_path / "other", current="c"))
    assert default_namespace(current_c, None) == "team-b"
    assert default_namespace(current_c, "bare") == "default"


def test_the_exit_codes_are_kubectls() -> None:
    assert (EXIT_OK, EXIT_ERROR, EXIT_USAGE) == (0, 1, 2)
    assert cli.EXIT_CANNOT_RUN == EXIT_ERROR  # a cluster not reached is an error, not usage


def test_the_help_names_the_charts_namespace_as_discovery_uses_it() -> None:
    from provisioner.commands import installation, kubectl_flags

    assert kubectl_flags.CHART_NAMESPACE == installation.CHART_NAMESPACE
