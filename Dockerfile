# syntax=docker/dockerfile:1
#
# The controller image. Three stages:
#   pulumi   builds the Pulumi CLI from Go modules with the project's own tool installer
#            (`python -m provisioner.toolchain.installer --only pulumi`), the very command `make
#            tools` runs, so the image's CLI is the tested CLI: same version, same wrapper
#            module, same version stamp, and the dynamic-provider launcher placed beside it.
#   python   installs the package into a virtualenv with the pinned constraints, as the
#            Makefile does (without the dev extras and not editable).
#   runtime  the two results on a slim Python, as a non-root user.
#
# No release download site is used: Go modules come from the Go module proxy, Python
# packages from the package index.

ARG GO_VERSION=1.26.8
ARG PYTHON_VERSION=3.11

FROM golang:${GO_VERSION}-bookworm AS pulumi
# The installer is Python (Debian bookworm ships 3.11, the project's minimum).
RUN apt-get update \
 && apt-get install --yes --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml ./
COPY provisioner/ provisioner/
ENV ATOMIC_GANG_CACHE=/opt/atomic-gang
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    python3 -m provisioner.toolchain.installer --only pulumi --print-path > /tmp/pulumi-bin \
 && mkdir -p /out/bin \
 && cp "$(cat /tmp/pulumi-bin)/pulumi" "$(cat /tmp/pulumi-bin)/pulumi-resource-pulumi-python" /out/bin/ \
 && /out/bin/pulumi version

FROM python:${PYTHON_VERSION}-slim-bookworm AS python
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY pyproject.toml constraints.txt README.md ./
COPY provisioner/ provisioner/
COPY stacks/ stacks/
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --disable-pip-version-check --upgrade pip==25.3 \
 && pip install --disable-pip-version-check -c constraints.txt .

FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
RUN groupadd --gid 65532 atomic-gang \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin atomic-gang \
 && mkdir -p /var/lib/atomic-gang \
 && chown 65532:65532 /var/lib/atomic-gang
COPY --from=python /opt/venv /opt/venv
COPY --from=pulumi /out/bin/ /opt/pulumi/bin/
# The launcher starts dynamic providers with this interpreter, so they import the same
# libraries (and the `stacks` package) as the controller.
ENV PATH=/opt/venv/bin:/opt/pulumi/bin:$PATH \
    ATOMIC_GANG_PYTHON=/opt/venv/bin/python \
    PULUMI_SKIP_UPDATE_CHECK=true \
    HOME=/tmp \
    PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["atomic-gang"]
CMD ["controller", "--config", "/etc/atomic-gang/settings.yaml"]
