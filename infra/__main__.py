"""Entry point of the bootstrap program (`main: infra/` in the root Pulumi.yaml)."""

from infra.program import main

main()
