"""Product build tooling: the pinned versions of the Go-built tools and their installer.

The Dockerfile's build stage and `make tools` both run `python -m provisioner.toolchain`, so
the image's Pulumi CLI is the one the tests ran against.
"""
