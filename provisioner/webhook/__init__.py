"""The validating webhook for batch/v1 Jobs: refuses an invalid gang Job at create.

- `review`: pure AdmissionReview in, answer out, with the Workload path's own messages.
- `server`: the Starlette app and the uvicorn HTTPS server that serves it.

The controller starts a `WebhookServer`; `python -m provisioner.webhook` runs one alone.
This package imports no Kubernetes client, AWS SDK or Pulumi.
"""

from provisioner.webhook.review import ReviewError, is_gang_job, job_pod_count, review
from provisioner.webhook.server import DEFAULT_CERT_DIR, JOB_WEBHOOK_PATH, WebhookServer, build_app

__all__ = [
    "DEFAULT_CERT_DIR",
    "JOB_WEBHOOK_PATH",
    "ReviewError",
    "WebhookServer",
    "build_app",
    "is_gang_job",
    "job_pod_count",
    "review",
]
