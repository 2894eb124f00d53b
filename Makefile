# Trawl developer entry points. `make test` is what CI runs (.ci/run): it sets up, lints and runs every layer.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

# System packages first, before anything is built (hack/bootstrap.sh: installs them as root, otherwise
# names the exact command). Run while the Makefile is read so that a missing program is one line,
# within seconds, not a build followed by a traceback. Targets that need no system package skip it.
ifneq ($(if $(MAKECMDGOALS),$(filter-out clean images k8s-binaries lock,$(MAKECMDGOALS)),setup),)
BOOTSTRAP_ERROR := $(shell hack/bootstrap.sh)
ifneq ($(.SHELLSTATUS),0)
$(error $(or $(BOOTSTRAP_ERROR),hack/bootstrap.sh failed))
endif
endif

.PHONY: setup bench-setup lock k8s-binaries tools test test-layers test-layers-main test-layers-sinks test-e2e test-unit test-redis test-browser test-sinks test-cluster test-faults test-rediscluster test-redissentinel lint typecheck crd demo bench e2e e2e-build e2e-kind images clean

# Dependencies come from the lock (requirements/*.txt, every file's sha256 checked), the package itself
# on top without resolving anything again: the same versions on every machine, in CI and in the image.
$(VENV)/.installed: pyproject.toml requirements/test.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r requirements/test.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

setup: $(VENV)/.installed

# The benchmark peers (Dramatiq, Celery, RQ, arq, Huey, Scrapy, ...) on top of setup, from their lock.
bench-setup: setup
	$(PY) -m pip install --quiet --require-hashes -r requirements/bench.txt

# Regenerate requirements/*.txt after changing a dependency in pyproject.toml (uv from PyPI, cached).
lock:
	hack/lock.sh

# Builds kube-apiserver and etcd once (cached under ~/.cache/trawl/k8s) and exports the folder.
k8s-binaries:
	@hack/build-k8s-binaries.sh

# kube-apiserver and etcd for the cluster tests and the demo: KUBEBUILDER_ASSETS if set, else built
# once (a few minutes) and cached by hack/build-k8s-binaries.sh.
ASSETS = KUBEBUILDER_ASSETS="$${KUBEBUILDER_ASSETS:-$$(hack/build-k8s-binaries.sh)}"

# MinIO for the S3 sink tests: TRAWL_MINIO if set, else built once and cached by hack/build-minio.sh.
MINIO = TRAWL_MINIO="$${TRAWL_MINIO:-$$(hack/build-minio.sh)}"

# The Go tools the tests run (built once, cached under ~/.cache/trawl): helm (chart rendering and
# lint), the Prometheus alert-rule checker (hack/rulecheck), kstatus (Flux's health computation,
# hack/kstatus: the status tests) and actionlint (the release workflow).
tools:
	@hack/build-helm.sh >/dev/null
	@hack/build-go-tool.sh rulecheck >/dev/null
	@hack/build-go-tool.sh kstatus >/dev/null
	@hack/build-go-tool.sh actionlint >/dev/null

# The whole suite, as CI runs it (hack/test.sh): the set-up (the real node's Debian packages, make setup,
# kube-apiserver + etcd, make tools; MinIO and the real node's builds in the background), make lint
# typecheck, then every layer (unit, setup, redis, browser, cluster, faults, rediscluster, redissentinel;
# e2e_kind where Docker answers), sinks once MinIO is built, e2e on a real node last. A skipped test fails
# it (tests/skip_check.py lists the skips it allows). E2E=skip leaves the e2e layer out, for a machine
# where no real node can start (not root, no cgroups); without it such a machine fails at once.
E2E ?=
test:
	@E2E=$(E2E) hack/test.sh

test-layers: test-layers-main test-layers-sinks

test-layers-main: setup
	$(ASSETS) $(PY) -m pytest -p no:cacheprovider -m "not e2e and not sinks"

test-layers-sinks: setup
	$(MINIO) $(PY) -m pytest -p no:cacheprovider -m sinks

# The real one-node Kubernetes layer (tests/e2e): root, and the binaries/images of `make e2e-build`;
# it skips with the reason where a node cannot start (and `make test` fails on that skip).
# -s: the log shows what each scenario measured (pod start-up, scale-up, takeover times).
test-e2e: setup
	$(ASSETS) $(PY) -m pytest -p no:cacheprovider -s -m e2e tests/e2e

test-unit: setup
	$(PY) -m pytest -m unit

test-redis: setup
	$(PY) -m pytest -m redis

test-browser: setup
	$(PY) -m pytest -m browser

test-sinks: setup
	$(MINIO) $(PY) -m pytest -m sinks

test-cluster: setup
	$(ASSETS) $(PY) -m pytest -m cluster

test-faults: setup
	$(ASSETS) $(PY) -m pytest -m faults

# A real 6-node Redis Cluster (3 masters, 3 replicas; redis-cli --cluster create): queue, workers,
# operator and CLI on it, a master killed mid-job. Part of test-layers like every marker but e2e.
test-rediscluster: setup
	$(ASSETS) $(PY) -m pytest -m rediscluster

# A real Redis Sentinel deployment (a master, a replica, 3 Sentinels): queue, workers, operator and CLI
# through the Sentinels, the master SIGKILLed mid-job. Part of test-layers like every marker but e2e.
test-redissentinel: setup
	$(ASSETS) $(PY) -m pytest -m redissentinel

# ruff, the layer contract (import-linter, [tool.importlinter] in pyproject.toml) and BuildKit's
# Dockerfile checks (hack/lint-dockerfile.sh: the linter is built once, a few minutes cold).
lint: setup
	$(VENV)/bin/ruff check operator tests bench hack
	$(VENV)/bin/ruff format --check operator tests bench hack
	$(VENV)/bin/lint-imports
	hack/lint-dockerfile.sh worker_image/Dockerfile worker_image/Dockerfile.browser

typecheck: setup
	$(VENV)/bin/mypy

crd: setup
	$(VENV)/bin/trawl crd

demo: setup
	$(ASSETS) $(VENV)/bin/trawl dev up

# Container image (needs a Docker engine): one image, `trawl operator` and `trawl worker`.
#   make images IMAGE=registry.example.com/team/trawl IMAGE_TAG=dev
#   make images DOCKER_BUILD_FLAGS="--push --platform linux/amd64,linux/arm64"   # buildx: build and push
#   make images DOCKER_BUILD_FLAGS="--build-arg PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:..."
DOCKER ?= docker
IMAGE ?= ghcr.io/trawl-dev/trawl
IMAGE_TAG ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
DOCKER_BUILD_FLAGS ?=
images:
	$(DOCKER) build -f worker_image/Dockerfile -t $(IMAGE):$(IMAGE_TAG) \
	  --build-arg VERSION=$(IMAGE_TAG) --build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
	  --build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) $(DOCKER_BUILD_FLAGS) .

# Real one-node Kubernetes (root, Debian): packages, node binaries (~25 min cold, cached under
# ~/.cache/trawl), images (the Dockerfile built by a private dockerd), then the e2e layer.
e2e-build:
	hack/realnode/deps.sh
	hack/build-k8s-binaries.sh >/dev/null
	hack/realnode/build.sh
	hack/realnode/images.sh >/dev/null

e2e: setup e2e-build test-e2e

# kind end-to-end (needs a Docker engine): cluster, image, helm install, the shared scenarios
# (tests/e2e/scenarios.py), helm uninstall, teardown; skipped with the reason without Docker.
e2e-kind: setup
	$(PY) -m pytest -p no:cacheprovider -rs -m e2e_kind tests/e2e_kind

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
