"""The bootstrap program (`pulumi up` at the repository root): IAM, EKS access, Kueue
queues and the Helm release for one cluster. See `program` for the order of things."""
