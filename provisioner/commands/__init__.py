"""The operator commands: `atomic-gang` and what each of its subcommands runs.

- `cli`: the `atomic-gang` command line; each subcommand imports its module only when run.
- `controller`: `atomic-gang controller`, the controller built by `provisioner.assembly`.
- `pools`: `atomic-gang pools`, every pool's phase, instances and stack.
- `doctor`, `doctor_install`: `atomic-gang doctor`, the preflight checks.
- `explain`: `atomic-gang explain NAMESPACE/JOB`, why a Job is not running yet.
- `installation`: where the installed controller lives, found from the cluster.

This room sits on top: it may import the composition root and every room below it, and
nothing in the product imports it (an import contract checks both).
"""
