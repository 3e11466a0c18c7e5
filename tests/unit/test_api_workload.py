"""Kueue v1beta2 views: parsing a realistic Workload, and our pod-set updates."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.workload import (
    AdmissionCheck,
    AdmissionCheckState,
    CheckState,
    PodSetUpdate,
    Toleration,
    Workload,
    gang_pod_set_updates,
)

pytestmark = pytest.mark.unit

CHECK = "atomic-gang-check"
NOW = datetime(2025, 3, 1, 12, 5, 0, tzinfo=UTC)

# Shaped after kueue.x-k8s.io/v1beta2 Workload (Kueue v0.19 apis/kueue/v1beta2), as Kueue
# writes one for a batch/v1 Job with quota reserved and our check still Pending. It holds
# fields the views do not model, to show they are ignored.
WORKLOAD_JSON = """
{
  "apiVersion": "kueue.x-k8s.io/v1beta2",
  "kind": "Workload",
  "metadata": {
    "name": "job-allreduce-pretrain-3c1f2",
    "namespace": "default",
    "uid": "0b6a2c86-1111-4a2b-9c0d-123456789abc",
    "resourceVersion": "918273",
    "generation": 1,
    "creationTimestamp": "2025-03-01T11:58:00Z",
    "labels": {"kueue.x-k8s.io/job-uid": "a1b2c3d4-0000-4000-8000-000000000001"},
    "annotations": {"kueue.x-k8s.io/job-owner-gvk": "batch/v1, Kind=Job"},
    "finalizers": ["kueue.x-k8s.io/resource-in-use"],
    "ownerReferences": [
      {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "allreduce-pretrain",
        "uid": "a1b2c3d4-0000-4000-8000-000000000001",
        "controller": true,
        "blockOwnerDeletion": true
      }
    ],
    "managedFields": [{"manager": "kueue", "operation": "Update"}]
  },
  "spec": {
    "active": true,
    "queueName": "gang-queue",
    "priority": 0,
    "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                         "name": "training"},
    "podSets": [
      {
        "name": "main",
        "count": 4,
        "template": {
          "metadata": {
            "labels": {"atomic-gang.k8s.aws/pool": "pretrain-p4d"},
            "annotations": {"atomic-gang.k8s.aws/count": "4"}
          },
          "spec": {
            "restartPolicy": "Never",
            "containers": [
              {
                "name": "trainer",
                "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:latest",
                "resources": {"limits": {"nvidia.com/gpu": "8"}}
              }
            ]
          }
        },
        "topologyRequest": {"podIndexLabel": "batch.kubernetes.io/job-completion-index"}
      }
    ]
  },
  "status": {
    "conditions": [
      {
        "type": "QuotaReserved",
        "status": "True",
        "observedGeneration": 1,
        "lastTransitionTime": "2025-03-01T11:58:01Z",
        "reason": "QuotaReserved",
        "message": "Quota reserved in ClusterQueue gang-cluster-queue"
      },
      {
        "type": "Admitted",
        "status": "False",
        "observedGeneration": 1,
        "lastTransitionTime": "2025-03-01T11:58:01Z",
        "reason": "UnsatisfiedAdmissionChecks",
        "message": "The workload has not all admission checks"
      }
    ],
    "admission": {
      "clusterQueue": "gang-cluster-queue",
      "podSetAssignments": [
        {
          "name": "main",
          "flavors": {"cpu": "gang-flavor", "memory": "gang-flavor",
                      "nvidia.com/gpu": "gang-flavor"},
          "resourceUsage": {"cpu": "384", "memory": "4608Gi", "nvidia.com/gpu": "32"},
          "count": 4
        }
      ]
    },
    "admissionChecks": [
      {
        "name": "other-check",
        "state": "Ready",
        "lastTransitionTime": "2025-03-01T11:58:02Z",
        "message": "",
        "podSetUpdates": [
          {
            "name": "main",
            "labels": {"team": "ml"},
            "tolerations": [{"operator": "Exists"}]
          }
        ]
      },
      {
        "name": "atomic-gang-check",
        "state": "Pending",
        "lastTransitionTime": "2025-03-01T11:58:01Z",
        "message": "",
        "retryCount": 1
      }
    ],
    "resourceRequests": [
      {"name": "main", "resources": {"cpu": "384", "nvidia.com/gpu": "32"}}
    ],
    "requeueState": {"count": 1, "requeueAt": "2025-03-01T11:57:00Z"},
    "schedulingStats": {"evictions": []},
    "someFutureField": {"nested": true}
  }
}
"""
WORKLOAD: dict[str, Any] = json.loads(WORKLOAD_JSON)


def test_parses_the_fields_the_controller_reads() -> None:
    wl = Workload.from_dict(WORKLOAD)
    assert wl.metadata.name == "job-allreduce-pretrain-3c1f2"
    assert wl.metadata.namespace == "default"
    assert wl.metadata.resource_version == "918273"
    assert wl.metadata.deletion_timestamp is None
    assert wl.owner is not None
    assert (wl.owner.kind, wl.owner.name, wl.owner.uid) == (
        "Job",
        "allreduce-pretrain",
        "a1b2c3d4-0000-4000-8000-000000000001",
    )
    assert wl.spec.queue_name == "gang-queue"
    assert wl.is_active
    assert wl.total_pod_count == 4
    (pod_set,) = wl.spec.pod_sets
    assert pod_set.template.metadata.labels == {c.POOL_LABEL: "pretrain-p4d"}
    assert pod_set.template.metadata.annotations == {c.ANN_COUNT: "4"}
    assert wl.status.admission is not None
    assert wl.status.admission.cluster_queue == "gang-cluster-queue"
    assert wl.status.admission.pod_set_assignments[0].count == 4
    assert wl.is_true(c.WL_QUOTA_RESERVED)
    assert not wl.is_true(c.WL_ADMITTED)
    assert not wl.is_true(c.WL_FINISHED)
    assert not wl.is_true(c.WL_EVICTED)
    ours = wl.check(CHECK)
    assert ours is not None and ours.state == c.CheckState.PENDING and ours.retry_count == 1
    other = wl.check("other-check")
    assert other is not None and other.pod_set_updates[0].tolerations[0].operator == "Exists"
    assert wl.check("missing") is None


def test_deactivated_and_deleted_workloads_read_as_such() -> None:
    body = copy.deepcopy(WORKLOAD)
    body["spec"]["active"] = False
    body["metadata"]["deletionTimestamp"] = "2025-03-01T12:00:00Z"
    wl = Workload.from_dict(body)
    assert not wl.is_active
    assert wl.metadata.deletion_timestamp == datetime(2025, 3, 1, 12, tzinfo=UTC)


def test_minimal_workload_parses() -> None:
    wl = Workload.from_dict(
        {"metadata": {"name": "w", "namespace": "ns"}, "spec": {"podSets": [{"count": 2}]}}
    )
    assert wl.spec.pod_sets[0].name == "main"
    assert wl.status.admission_checks == ()
    assert wl.owner is None


def test_check_states_are_kueues_in_one_type() -> None:
    # Kueue v1beta2's CheckState values; the model reads an entry as the enum itself.
    assert [s.value for s in c.CheckState] == ["Pending", "Ready", "Retry", "Rejected"]
    assert CheckState is c.CheckState
    entry = AdmissionCheckState.model_validate({"name": "x", "state": "Retry"})
    assert entry.state is c.CheckState.RETRY
    with pytest.raises(ValueError, match="Pending"):
        AdmissionCheckState.model_validate({"name": "x", "state": "Done"})


# --- our check's pod-set updates -----------------------------------------------------------

UPDATES = gang_pod_set_updates(Workload.from_dict(WORKLOAD), "pretrain-p4d", "g2")


def test_pod_set_updates_pin_to_pool_and_group() -> None:
    assert [u.to_dict() for u in UPDATES] == [
        {
            "name": "main",
            "nodeSelector": {c.POOL_LABEL: "pretrain-p4d", c.GROUP_LABEL: "g2"},
            "tolerations": [
                {
                    "key": c.GANG_TAINT_KEY,
                    "operator": "Equal",
                    "value": "pretrain-p4d",
                    "effect": "NoSchedule",
                }
            ],
        }
    ]


def test_pod_set_update_round_trip() -> None:
    update = PodSetUpdate(
        name="main",
        node_selector={"a": "b"},
        tolerations=(Toleration(key="k", operator="Exists", effect="NoSchedule"),),
    )
    assert PodSetUpdate.from_dict(update.to_dict()) == update


# --- AdmissionCheck ----------------------------------------------------------------------


def test_admission_check_view() -> None:
    ac = AdmissionCheck.from_dict(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": CHECK, "resourceVersion": "77", "generation": 1},
            "spec": {"controllerName": c.CONTROLLER_NAME},
            "status": {
                "conditions": [
                    {
                        "type": c.AC_ACTIVE,
                        "status": "True",
                        "lastTransitionTime": "2025-03-01T11:00:00Z",
                        "reason": "Active",
                        "message": "atomic-gang-provisioner is running",
                    }
                ]
            },
        }
    )
    assert ac.is_ours()
    assert not ac.is_ours("kueue.x-k8s.io/provisioning-request")
    assert ac.is_true(c.AC_ACTIVE)
    fresh = AdmissionCheck.from_dict(
        {"metadata": {"name": "x"}, "spec": {"controllerName": "someone-else"}}
    )
    assert not fresh.is_ours() and not fresh.is_true(c.AC_ACTIVE)
