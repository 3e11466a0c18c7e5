"""The validating webhook for gang jobs (batch/v1 Jobs, JobSets, PyTorchJobs, TrainJobs):
refuses an invalid gang job at create.

- `review`: pure AdmissionReview in, answer out, with the Workload path's own messages.
- `server`: the Starlette app and the uvicorn HTTPS server that serves it.
- `certs`: the self-managed CA and serving certificate, when to renew them, what to trust.
- `rotator`: keeps them in their Secret, the caBundle in step, and the server's files current
  (through a `CertStore` Protocol; `provisioner.kube.webhook_certs` implements it).

The controller starts a `WebhookServer`; `python -m provisioner.webhook` runs one alone.
This package imports no Kubernetes client, AWS SDK or Pulumi; it asks EC2 who owns a Job's
AMI only through `provisioner.cloud.images` (amiPolicy).
"""

from provisioner.webhook.review import ReviewError, is_gang_job, job_pod_count, review
from provisioner.webhook.server import (
    DEFAULT_CERT_DIR,
    GANG_JOB_WEBHOOK_PATH,
    JOB_WEBHOOK_PATH,
    WebhookServer,
    build_app,
)

__all__ = [
    "DEFAULT_CERT_DIR",
    "GANG_JOB_WEBHOOK_PATH",
    "JOB_WEBHOOK_PATH",
    "ReviewError",
    "WebhookServer",
    "build_app",
    "is_gang_job",
    "job_pod_count",
    "review",
]
