# syntax=docker/dockerfile:1
#
# The controller image. Stages:
#   pulumi-go       builds the Pulumi CLI from Go modules with the project's own tool
#                   installer (`python -m provisioner.toolchain --only pulumi`), the command
#                   `make tools` runs, so the image's CLI is the tested CLI: same version, same
#                   wrapper module, same stamp, the dynamic-provider launcher beside it.
#   pulumi-context  takes that same installer's output from a build context named
#                   `pulumi-cli` instead (what `make image` passes: the CLI is already built
#                   in the tool cache, and no Go image is needed).
#   python          installs the package into a virtualenv with the pinned constraints, as
#                   the Makefile does (without the dev extras and not editable).
#   runtime         the two results on the Python base, as a non-root user.
#
# Base images are build arguments. With a registry, the defaults work as they are (docker or
# podman). Without one, `make image` makes a Debian bookworm base with mmdebstrap and passes
# it as PYTHON_BASE (see image/build.sh). No release download site is used: Go modules come
# from the Go module proxy, Python packages from the package index.

ARG PYTHON_BASE=python:3.11-slim-bookworm
ARG GO_BASE=golang:1.26.8-bookworm
# pulumi-go or pulumi-context: where the runtime's Pulumi CLI comes from.
ARG PULUMI_STAGE=pulumi-go

FROM ${GO_BASE} AS pulumi-go
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
    python3 -m provisioner.toolchain --only pulumi --print-path > /tmp/pulumi-bin \
 && mkdir -p /out/bin \
 && cp "$(cat /tmp/pulumi-bin)/pulumi" "$(cat /tmp/pulumi-bin)/pulumi-resource-pulumi-python" /out/bin/ \
 && /out/bin/pulumi version

FROM ${PYTHON_BASE} AS pulumi-context
COPY --from=pulumi-cli pulumi pulumi-resource-pulumi-python /out/bin/
RUN /out/bin/pulumi version

FROM ${PULUMI_STAGE} AS pulumi

FROM ${PYTHON_BASE} AS python
# An extra CA bundle for the package index (a TLS-inspecting egress proxy), mounted by the
# builder; only this stage sees it, never the runtime image.
ARG PIP_CERT=""
WORKDIR /src
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# Dependencies first, from the pins alone: a source change rebuilds only the layer below.
COPY pyproject.toml constraints.txt ./
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --disable-pip-version-check ${PIP_CERT:+--cert "$PIP_CERT"} --upgrade pip==25.3 \
 && python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' > /tmp/requirements.txt \
 && pip install --disable-pip-version-check ${PIP_CERT:+--cert "$PIP_CERT"} -c constraints.txt -r /tmp/requirements.txt \
 && find /opt/venv -name __pycache__ -prune -exec rm -rf {} + \
 && python -m compileall -q /opt/venv/lib
COPY README.md ./
COPY provisioner/ provisioner/
COPY stacks/ stacks/
# The root filesystem is read-only at run time: the package's bytecode is compiled here.
RUN pip install --disable-pip-version-check ${PIP_CERT:+--cert "$PIP_CERT"} --no-deps -c constraints.txt . \
 && python -m compileall -q /opt/venv/lib/python3*/site-packages/provisioner \
    /opt/venv/lib/python3*/site-packages/stacks

FROM ${PYTHON_BASE} AS runtime
RUN groupadd --gid 65532 atomic-gang \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin atomic-gang \
 && mkdir -p /var/lib/atomic-gang \
 && chown 65532:65532 /var/lib/atomic-gang
COPY --from=python /opt/venv /opt/venv
COPY --from=pulumi /out/bin/ /opt/pulumi/bin/
# The launcher starts dynamic providers with this interpreter, so they import the same
# libraries (and the `stacks` package) as the controller. Logs are JSON lines by default:
# what a log pipeline parses; `--log-format text` for a terminal.
ENV PATH=/opt/venv/bin:/opt/pulumi/bin:$PATH \
    ATOMIC_GANG_PYTHON=/opt/venv/bin/python \
    ATOMIC_GANG_LOG_FORMAT=json \
    PULUMI_SKIP_UPDATE_CHECK=true \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["atomic-gang"]
CMD ["controller", "--config", "/etc/atomic-gang/settings.yaml"]
