# Every target sets itself up: a fresh machine needs only Python 3.11+ and Go 1.26+.
# The venv lives in the checkout (.venv); the Go-built tools live in a cache shared by all
# checkouts on the machine: $${ATOMIC_GANG_CACHE:-$${XDG_CACHE_HOME:-~/.cache}/atomic-gang}.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# `make test` runs its slow suites on this many pytest-xdist workers, a whole file per worker
# in collection order (each worker starts its own control plane, Kueue and emulator; e2e
# files come last on each, see tests/conftest.py). Much of a slow test's time is waiting
# (a join delay, a keep-warm TTL, a Capacity Block's end): two workers kept two cores about
# half busy, so three. The unit tests only compute: UNIT_WORKERS, one per core.
# TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 3
UNIT_WORKERS ?= 2

.PHONY: all venv tools demo preflight test test-fast test-unit test-integration test-e2e lint dev-up dev-down dev-status clean
.PHONY: image image-host test-image release test-release late-builds

all: test

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip==25.3
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,bootstrap]'
	@touch $(STAMP)

venv: $(STAMP)

# kubectl (the apiserver's release) is not one of the tools the product's own set-up needs
# (`python -m provisioner.toolchain` alone); the test command's `kubectl wait` test does, so
# `make tools` builds it too. Pulumi's Kubernetes provider (the bootstrap test) and the
# registry (test-release) are built by `late-builds`.
tools: $(STAMP)
	$(PY) -m provisioner.toolchain
	$(PY) -m provisioner.toolchain --only kubectl

demo: tools
	$(PY) -m devenv demo

# The house rules (lint/house_rules.py) first: a file over 500 lines, a string compared
# with a check state or a phase, an Event reason outside the enum.
lint: $(STAMP)
	$(PY) -m lint.house_rules
	$(VENV)/bin/ruff check provisioner stacks infra devenv tests bench release lint
	$(VENV)/bin/ruff format --check provisioner stacks infra devenv tests bench release lint
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy --strict provisioner stacks release lint
	$(VENV)/bin/mypy infra devenv bench tests/support

# Room on the disk for what the test command builds (devenv/disk_preflight.py): a disk that
# fills half-way fails a late build after an hour, far from its cause.
preflight: $(STAMP)
	$(PY) -m devenv.disk_preflight

# The fast lane: lint, then the unit tests. Neither needs a Go-built tool, so a failure here
# stops `make test` in minutes, before `tools` builds anything.
test-fast: lint
	$(PY) -m pytest tests/unit -n $(UNIT_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The fast lane, then the slow suites (the real apiserver, Kueue, Pulumi, the emulator), then
# the image built with podman and run as the chart runs it (test-image), then the release
# served from a local OCI registry (test-release). The slowest tests are listed at the end,
# so a CI run says where its time went.
#
# The slow suites' workers spend much of their time waiting (a join delay, a keep-warm TTL),
# leaving about half of two cores idle, while the builds only the later stages need take
# long on a fresh machine and little CPU from a warm cache: `late-builds` runs beside them at
# a lower priority. The tests that need one of those builds (marker `late_tools`: the
# bootstrap test needs the Kubernetes provider) are left out of that run and run once the
# build has finished, so none waits on a build inside its own timeout and a cold run cannot
# pass or fail by how busy the machine is. Its output goes to $(LATE_LOG), printed when it
# fails.
LATE_LOG := .late-builds.log
test: preflight test-fast
	$(MAKE) tools
	@echo "[test] the image, the registry and Pulumi's Kubernetes provider build beside the slow suites (log: $(LATE_LOG))"
	@$(MAKE) --no-print-directory late-builds >$(LATE_LOG) 2>&1 & late=$$!; \
	$(PY) -m pytest tests --ignore=tests/unit --ignore=tests/image --ignore=tests/release \
		-m "not late_tools" \
		--durations=25 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS); \
	suites=$$?; \
	wait $$late; built=$$?; \
	grep -h "built in\|up to date" $(LATE_LOG) || true; \
	if [ $$built -ne 0 ]; then echo "[test] late-builds failed (exit $$built):"; tail -40 $(LATE_LOG); fi; \
	[ $$suites -eq 0 ] && [ $$built -eq 0 ]
	$(PY) -m pytest tests/e2e -m late_tools --durations=5 $(PYTEST_ARGS)
	$(MAKE) test-image
	$(MAKE) test-release

# The builds only the last stages need, two at a time: the Go tools (CPU) beside the image
# (mostly apt, debootstrap and layer copies).
late-builds: $(STAMP)
	@nice -n 10 $(PY) -m provisioner.toolchain $$($(PY) -c 'from provisioner.toolchain.versions import LATE_BUILT; print(*("--only " + n for n in LATE_BUILT))') & tools=$$!; \
	nice -n 10 $(MAKE) --no-print-directory image; image=$$?; \
	wait $$tools && [ $$image -eq 0 ]

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: tools
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

test-e2e: tools
	$(PY) -m provisioner.toolchain $$($(PY) -c 'from provisioner.toolchain.versions import LATE_BUILT; print(*("--only " + n for n in LATE_BUILT))')
	$(PY) -m pytest tests/e2e $(PYTEST_ARGS)

# --- Container image (podman; see image/) ---------------------------------------------------
# podman, runc and mmdebstrap, installed with apt when missing (root or sudo).
image-host:
	./image/setup-host.sh

# ATOMIC_GANG_PYTHON_BASE=python:3.11-slim-bookworm takes a registry base instead of making one.
image: $(STAMP) image-host
	PYTHON=$(PY) ./image/build.sh

# The image as the chart runs it, against the embedded default (see tests/image).
test-image: tools image
	$(PY) -m pytest tests/image $(PYTEST_ARGS)

# The release (dist/): the chart packaged at pyproject's version, the image as an OCI archive
# with OCI labels, and its CycloneDX SBOM (see release/). `podman load -i` reads the archive.
release: image
	$(PY) -m release --out dist

# The release pushed to, pulled from and installed from a local OCI registry (the
# Distribution registry, built from Go modules on request like kubectl; see tests/release).
test-release: tools image
	$(PY) -m provisioner.toolchain --only registry
	$(PY) -m pytest tests/release $(PYTEST_ARGS)

dev-up: tools
	$(PY) -m devenv up

dev-status: $(STAMP)
	$(PY) -m devenv status

dev-down: $(STAMP)
	$(PY) -m devenv down

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .devenv

# --- Helm chart -----------------------------------------------------------------------------
# Both use the helm the toolchain builds (versions.py), never one found elsewhere by chance.
.PHONY: helm-lint helm-test
CHART := charts/atomic-gang-provisioner
# The values the reference install sets; the chart refuses to render without them.
HELM_REQUIRED := --set-string image.repository=registry.example/atomic-gang-provisioner \
	--set-string clusterName=my-eks-cluster --set-string defaults.region=us-east-1 \
	--set-string defaults.nodeRoleArn=arn:aws:iam::123456789012:role/eks-gang-node-role \
	--set-string kueue.clusterQueue.nominalQuota.cpu=256 \
	--set-string kueue.clusterQueue.nominalQuota.memory=1Ti

helm-lint: $(STAMP)
	@helm_dir="$$($(PY) -m provisioner.toolchain.installer --only helm --print-path)" && \
	kube_version="$$($(PY) -c 'from provisioner.toolchain.versions import KUBE_APISERVER as k; print(k.version)')" && \
	"$$helm_dir/helm" lint --strict --kube-version "$$kube_version" $(CHART) $(HELM_REQUIRED)

helm-test: $(STAMP)
	$(PY) -m pytest tests/chart $(PYTEST_ARGS)

.PHONY: fuzz chaos bench-scarcity bench-admission bench-scale bench-reaper bench-launch-reads \
	bench-emulator-reads bench

# 10,000 examples per fuzzing property (the test command runs 1,000).
fuzz: $(STAMP)
	ATOMIC_GANG_FUZZ_EXAMPLES=10000 $(PY) -m pytest tests/unit/test_fuzz_annotations.py \
		--hypothesis-show-statistics $(PYTEST_ARGS)

# 100 SIGKILLs over both modes; each mode's tally is printed and appended to chaos-report.jsonl.
chaos: tools
	ATOMIC_GANG_CHAOS_KILLS=100 ATOMIC_GANG_CHAOS_REPORT=chaos-report.jsonl \
		$(PY) -m pytest tests/chaos -s $(PYTEST_ARGS)

# Each benchmark prints its figures beside a baseline run; none asserts a time.
bench-scarcity: $(STAMP)
	$(PY) -m bench.bench_scarcity --plot docs/scarcity.png

bench-admission: tools
	$(PY) -m bench.bench_admission

bench-scale: tools
	$(PY) -m bench.bench_scale

bench-reaper: $(STAMP)
	$(PY) -m bench.bench_reaper

bench-launch-reads: $(STAMP)
	$(PY) -m bench.bench_launch_reads

bench-emulator-reads: $(STAMP)
	$(PY) -m bench.bench_emulator_reads

bench: bench-scarcity bench-reaper bench-launch-reads bench-emulator-reads bench-admission \
		bench-scale
	$(PY) -m bench.bench_stack_ops --rounds 5
