"""`helm lint --strict` over the chart, with the required values and with the options on."""

from __future__ import annotations

from tests.chart.conftest import CHART, KUBE_VERSION, REQUIRED, Helm


def _lint(helm: Helm, strings: dict[str, str], *extra: str) -> tuple[int, str]:
    args = [a for k, v in strings.items() for a in ("--set-string", f"{k}={v}")]
    done = helm.run("lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART), *args, *extra)
    return done.returncode, done.stdout + done.stderr


def test_lint_passes(helm: Helm) -> None:
    code, out = _lint(helm, REQUIRED)
    assert code == 0, out
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_lint_passes_with_the_options_on(helm: Helm) -> None:
    options = {
        **REQUIRED,
        "webhook.certMode": "selfSigned",
        "auth.mode": "irsa",
        "serviceAccount.roleArn": "arn:aws:iam::123456789012:role/atomic-gang-controller-role",
    }
    code, out = _lint(helm, options, "--set", "metrics.serviceMonitor.enabled=true")
    assert code == 0, out


def test_lint_without_values_names_what_is_required(helm: Helm) -> None:
    # helm lint reports a failed `required` as information, not an error; the fail-closed
    # renders are the chart render tests' job (test_chart_fail_closed.py).
    code, out = _lint(helm, {})
    assert code == 0, out
    assert "clusterName is required" in out
