"""The embedded default's Kueue lists the five job frameworks gangs are submitted as, and
registers its webhooks for exactly those kinds (and its own objects)."""

from __future__ import annotations

from pathlib import Path

from devenv import kueue_manager as km


def _hook(group: str, resource: str) -> dict[str, object]:
    return {"rules": [{"apiGroups": [group], "resources": [resource]}]}


def test_kueue_manages_jobs_jobsets_pytorchjobs_trainjobs_and_mpijobs() -> None:
    config = km._manager_config(1, 2, Path("/certs"))
    assert config["integrations"]["frameworks"] == [
        "batch/job",
        "jobset.x-k8s.io/jobset",
        "kubeflow.org/pytorchjob",
        "trainer.kubeflow.org/trainjob",
        "kubeflow.org/mpijob",
    ]


def test_only_the_webhooks_of_the_managed_kinds_are_registered() -> None:
    for wanted in (
        _hook("batch", "jobs"),
        _hook("jobset.x-k8s.io", "jobsets"),
        _hook("kubeflow.org", "pytorchjobs"),
        _hook("trainer.kubeflow.org", "trainjobs"),
        _hook("kubeflow.org", "mpijobs"),
        _hook("kueue.x-k8s.io", "workloads"),
    ):
        assert km.KUEUE_WEBHOOKS.wants(wanted), wanted
    for unwanted in (
        _hook("kubeflow.org", "tfjobs"),
        _hook("", "pods"),
        _hook("apps", "deployments"),
        _hook("ray.io", "rayjobs"),
    ):
        assert not km.KUEUE_WEBHOOKS.wants(unwanted), unwanted


def test_wait_for_pods_ready_is_a_knob_doctor_reads_both_ways() -> None:
    from provisioner.commands.doctor_install import wait_for_pods_ready

    on = km._manager_config(1, 2, Path("/certs"))
    assert on["waitForPodsReady"] == km.DEFAULT_WAIT_FOR_PODS_READY
    assert wait_for_pods_ready(on, []) == (
        True,
        "on (config config.kueue.x-k8s.io/v1beta2), timeout 10m, blockAdmission False",
    )
    short = {"timeout": "20s", "requeuingStrategy": {"backoffLimitCount": 0}}
    assert km._manager_config(1, 2, Path("/certs"), short)["waitForPodsReady"] == short
    off = km._manager_config(1, 2, Path("/certs"), None)
    assert "waitForPodsReady" not in off
    # Every gate in the config: Kueue refuses gates given both there and on the command line.
    assert off["featureGates"] == {
        "VisibilityOnDemand": False,
        km.DISABLE_WAIT_FOR_PODS_READY: True,
    }
    assert wait_for_pods_ready(off, []) == (
        False,
        "the DisableWaitForPodsReady feature gate is set",
    )
