"""The vocabulary of `atomic-gang doctor`'s checks: a line's result, how a check fails or
warns, and the report.

A check is a named callable that returns its pass line or raises `Failed` (with the fix)
or `Warned`. `run_checks` runs every check even after a failure, so one run lists
everything to fix; `report` prints the lines and the tally (`report_json`: the same as one
JSON document). Used by `doctor` and by each area's checks (`doctor_kube`, `doctor_aws`,
`doctor_install`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from provisioner.cloud.errors import CloudError
from provisioner.kube.errors import KubeError

__all__ = ["Check", "Failed", "Result", "Warned", "report", "report_json", "run_checks", "to_json"]

Check = tuple[str, Callable[[], str]]  # a line's name, and what says its pass line or raises


@dataclass(frozen=True)
class Result:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    warn: bool = False  # ok, but worth changing: `fix` says why and how

    def render(self) -> str:
        if self.warn:
            return f"WARN  {self.name}: {self.detail}\n      fix: {self.fix}"
        line = f"{'pass' if self.ok else 'FAIL'}  {self.name}: {self.detail}"
        return line if self.ok else f"{line}\n      fix: {self.fix}"


class Failed(Exception):
    def __init__(self, detail: str, fix: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fix = fix


class Warned(Failed):
    """A link that works but is set up against the gang's interest; does not fail the run."""


def run_checks(checks: list[Check]) -> list[Result]:
    """Every check, in order, each to a Result, even after a failure: one run lists
    everything to fix."""
    results = []
    for name, check in checks:
        try:
            results.append(Result(name, True, check()))
        except Warned as err:
            results.append(Result(name, True, err.detail, err.fix, warn=True))
        except Failed as err:
            results.append(Result(name, False, err.detail, err.fix))
        except (KubeError, CloudError) as err:
            results.append(Result(name, False, str(err), "see the error above"))
        except Exception as err:  # one unreachable link must not hide the others
            results.append(Result(name, False, f"could not check: {err}", "see the error"))
    return results


def to_json(result: Result) -> dict[str, object]:
    return {
        "name": result.name,
        "ok": result.ok,
        "warn": result.warn,
        "detail": result.detail,
        "fix": result.fix,
    }


def report_json(results: list[Result], target: str, output: str = "json") -> int:
    """`doctor -o json` (or `-o yaml`, the same keys): one object on stdout: ``target``
    (where it looked, the text header), ``checks`` (in order, each ``name``, ``ok``,
    ``warn``, ``detail``, ``fix``), and ``summary`` (``passed``, ``warned``, ``failed``).
    The exit code is report's."""
    from provisioner.commands.kubectl_flags import dump

    failed = sum(1 for r in results if not r.ok)
    warned = sum(1 for r in results if r.warn)
    document = {
        "target": target,
        "checks": [to_json(r) for r in results],
        "summary": {"passed": len(results) - failed - warned, "warned": warned, "failed": failed},
    }
    print(dump(document, output))
    return 0 if not failed else 1


def report(results: list[Result]) -> int:
    for result in results:
        print(result.render())
    failed = sum(1 for r in results if not r.ok)
    warned = sum(1 for r in results if r.warn)
    print(f"{len(results) - failed - warned} passed, {warned} warned, {failed} failed")
    return 0 if not failed else 1
