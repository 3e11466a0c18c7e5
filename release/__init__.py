"""`make release`: the versioned artefacts a platform team installs from.

- the Helm chart packaged at the project's version (`helm package`);
- the controller image as an OCI archive (`podman save`), its config stamped with the
  `org.opencontainers.image.*` labels;
- a CycloneDX SBOM of what the image holds: the Python distributions in it and the Go
  modules compiled into its Go binaries (read from the image's own layers, not the host).

Not part of the product (not in the wheel, not in the image): it runs on the machine that
builds the release, with podman, helm (the toolchain's) and Go (`go version -m`).
"""
