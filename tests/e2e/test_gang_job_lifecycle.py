"""With the real Kueue manager and our controller: a gang Job from queue to completion.

Shows the whole contract on the embedded default's parts: Kueue suspends the Job and puts
our check Pending; the pool is acquired and Satisfied; the check goes Ready; Kueue admits
and unsuspends the Job with our nodeSelector and toleration; once the Job finishes the pool
is kept warm, and a second Job on it is admitted without a new launch.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.chart.conftest import Helm
from tests.e2e.conftest import (
    check_state,
    conditions,
    eventually,
    launched,
    phase,
    submit,
    workload_of,
)
from tests.support.charted_metrics import dashboard_exprs, metric_names, rule_exprs


def scrape(env: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The controller's /metrics as an operator's Prometheus reads it."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{env.settings.metrics_port}/metrics", timeout=5
    ) as response:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.read().decode())
            for s in family.samples
        }


def test_job_is_held_then_admitted_onto_its_gang_and_the_warm_pool_is_reused(
    gang_local: Any, namespace: str
) -> None:
    # Nodes join 2 s after launch, so the Pending hold lasts long enough to be seen.
    env = gang_local(join_delay=2.0)
    batch = k8s.BatchV1Api(env.control_plane.api_client())
    pool_name = f"lc-{uuid.uuid4().hex[:6]}"
    # The controller's registry is its own, but the environment may have served earlier
    # tests: what this test shows is what changed while it ran.
    before = scrape(env)

    created = submit(env, namespace, "first", pool_name)
    assert created.spec.suspend is True  # Kueue's webhook holds it

    # Quota first, with our check Pending: Kueue waits on us, the Job stays suspended.
    held = eventually(
        lambda: (
            (wl := workload_of(env, namespace, "first"))
            and conditions(wl).get("QuotaReserved") == "True"
            and check_state(wl) is not None
            and wl
        ),
        what="quota reserved with our check on the Workload",
    )
    assert check_state(held) == c.CheckState.PENDING
    assert conditions(held).get("Admitted") != "True"
    assert batch.read_namespaced_job("first", namespace).spec.suspend is True
    eventually(lambda: phase(env, pool_name) == Phase.SATISFIED, 120, "pool Satisfied")
    eventually(
        lambda: check_state(workload_of(env, namespace, "first")) == c.CheckState.READY,
        what="our check Ready",
    )
    eventually(
        lambda: conditions(workload_of(env, namespace, "first")).get("Admitted") == "True",
        what="Workload admitted",
    )
    job = eventually(
        lambda: (j := batch.read_namespaced_job("first", namespace)) and not j.spec.suspend and j,
        what="Job unsuspended",
    )
    template = job.spec.template.spec
    assert template.node_selector[c.POOL_LABEL] == pool_name
    assert c.GROUP_LABEL in template.node_selector
    assert any(
        t.key == c.GANG_TAINT_KEY and t.value == pool_name and t.effect == "NoSchedule"
        for t in template.tolerations or []
    )
    assert launched(env, pool_name) == 2

    # The Job simulator finishes it; Kueue finishes the Workload; the claim drops.
    eventually(
        lambda: conditions(workload_of(env, namespace, "first")).get("Finished") == "True",
        what="Workload finished",
    )
    eventually(lambda: phase(env, pool_name) == Phase.KEEP_WARM, 60, "pool KeepWarm")

    submit(env, namespace, "second", pool_name)
    eventually(
        lambda: conditions(workload_of(env, namespace, "second")).get("Admitted") == "True",
        what="second Workload admitted",
    )
    # Kueue unsuspends the Job in a write of its own after Admitted, as for the first Job.
    eventually(
        lambda: not batch.read_namespaced_job("second", namespace).spec.suspend,
        what="second Job unsuspended",
    )
    assert launched(env, pool_name) == 2, "the warm pool was reused, nothing new launched"

    # What an operator scrapes: one launch for the two Jobs (the second reused the warm
    # set), and each reconciler's lag and work.
    after = scrape(env)

    def gained(metric: str, /, **labels: str) -> float:
        key = (metric, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    launched_sets = sum(
        after[key] - before.get(key, 0.0)
        for key in after
        if key[0] == "atomic_gang_acquisitions_total" and ("result", "launched") in key[1]
    )
    assert launched_sets == 1
    for controller in ("workload", "gangnodepool"):
        assert gained("workqueue_queue_duration_seconds_count", name=controller) > 0
        assert gained("controller_runtime_reconcile_time_seconds_count", controller=controller) > 0


def _families(text: str) -> set[str]:
    """Every series name the exposition carries a family for (its # TYPE line), with the
    names a counter's and a histogram's samples take."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names |= {name} | {name + s for s in suffixes.get(kind, ())}
    return names


def test_every_metric_the_dashboard_and_alerts_query_is_served_after_a_gangs_life(
    gang_local: Any, namespace: str, tools: Any
) -> None:
    env = gang_local()
    pool_name = f"mx-{uuid.uuid4().hex[:6]}"
    submit(env, namespace, "only", pool_name)
    eventually(
        lambda: conditions(workload_of(env, namespace, "only")).get("Finished") == "True",
        what="Workload finished",
    )
    eventually(lambda: phase(env, pool_name) == Phase.KEEP_WARM, 60, "pool KeepWarm")
    # The reaper's sweep sets the pools gauge; it runs on its own period.
    eventually(
        lambda: any(name == "atomic_gang_pools" for name, _ in scrape(env)),
        60,
        "the pools gauge sampled",
    )
    with urllib.request.urlopen(
        f"http://127.0.0.1:{env.settings.metrics_port}/metrics", timeout=5
    ) as response:
        text = response.read().decode()
    served = _families(text)
    sampled = {name for name, _ in scrape(env)}

    rendered = Helm(tools["helm"].binary).render({"prometheusRule.enabled": True})
    alerts = rule_exprs(rendered.objects)
    assert len(alerts) >= 6, alerts
    board = dashboard_exprs(
        json.loads(
            next(
                o["data"]["atomic-gang-provisioner.json"]
                for o in rendered.all("ConfigMap")
                if o["metadata"]["name"].endswith("-dashboard")
            )
        )
    )
    charted = set().union(*map(metric_names, alerts + board))
    assert {
        "atomic_gang_leader",
        "workqueue_depth",
        "controller_runtime_reconcile_total",
    } <= charted
    missing = sorted(charted - served)
    assert not missing, f"charted but not served: {missing}"
    # What a gang's life must have produced, with samples (not only a family):
    for name in (
        "atomic_gang_build_info",
        "atomic_gang_leader",
        "atomic_gang_pools",
        "atomic_gang_acquisitions_total",
        "atomic_gang_time_to_ready_seconds_bucket",
        "atomic_gang_aws_calls_total",
        "atomic_gang_aws_call_duration_seconds_bucket",
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_work_duration_seconds_bucket",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_bucket",
    ):
        assert name in sampled, f"{name} has no sample after a gang's life"
