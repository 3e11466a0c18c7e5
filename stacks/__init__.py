"""The per-pool Pulumi program and its dynamic providers on boto3 (DESIGN §5).

Only the stack driver (``provisioner.pulumi_driver``) runs this program; the providers run
in the Pulumi CLI's Python provider host, which imports them by module and class name.

- `spec`: `PoolSpec` and `InstanceSetRecord`, what a pool's stack should hold.
- `program`: `pool_program`, the inline program.
- `launch_template`, `instance_profile`, `access_entry`, `placement_group`, `instance_set`:
  one resource and its provider each.
- `outputs`: the exported keys and `PoolOutputs`.
- `recovery`: finding what a crash-interrupted create left in AWS.
- `failures`: `PoolResourceError`, how a provider names what went wrong.
"""
