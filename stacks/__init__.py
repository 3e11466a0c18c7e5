"""The per-pool Pulumi program and its dynamic providers on boto3 (DESIGN §5).

Only the stack driver (``provisioner.pulumi_driver``) runs this program; the providers run
in the Pulumi CLI's Python provider host, which imports them by module and class name.

- `spec`: `PoolSpec` and `InstanceSetRecord`, what a pool's stack should hold.
- `pool_program`: `pool_program`, the inline program.
- `launch_template`, `instance_profile`, `access_entry`, `placement_group`, `instance_set`:
  one resource and its provider each.
- `outputs`: the exported keys and `PoolOutputs`.
- `adoption`: finding what a crash-interrupted create left in AWS.
- `failures`: `PoolResourceError`, how a provider's failure and its kind cross the CLI.

The provider modules' paths are written into every stack's state (providers are pickled by
reference): moving or renaming ``launch_template``, ``instance_profile``, ``access_entry``,
``placement_group``, ``instance_set`` or ``base`` strands existing stacks
(``tests/integration/test_stack_state_compat.py`` checks stacks written by older code).
"""
