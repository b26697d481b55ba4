# vacate. `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO         ?= go
BIN        := $(CURDIR)/bin
TOOLS_BIN  := $(BIN)/tools
STATICCHECK := $(TOOLS_BIN)/staticcheck
CONTROLLER_GEN := $(TOOLS_BIN)/controller-gen
HELM_DOCS  := $(TOOLS_BIN)/helm-docs
ACTIONLINT := $(TOOLS_BIN)/actionlint
# Go modules in this repository: vacate itself and the build-only modules.
MODULES    := . hack/controlplane hack/kwok hack/ec2-metadata-mock hack/tools
# -p 4: four packages at once, each with a dev cluster of its own. A
# package's tests wait on its cluster much of the time: at -p 3 two cores
# were 72% busy and the suite's length followed the packages' wall times
# added up over three; at -p 4 they are 82% busy and the suite is about
# three minutes shorter, for no more work. docs/dev/test-suite.md has what
# each package costs.
# -ldflags=-w: the ~50 race-built test binaries are linked without DWARF
# (stack traces and race reports do not need it), which saves about a
# fifth of their link time.
# -vet=off: `make verify` runs all of go vet on every module; the subset
# go test would run again costs about 40 CPU-seconds.
TEST_FLAGS ?= -race -count=1 -timeout 30m -p 4 -ldflags=-w -vet=off
# The longest packages first: go test starts them in this order, four at
# once, so the suite's length is not one of them started last. test/rbac
# and test/monitoring (a dev cluster each, and little CPU) came last in
# ./..., and the machine was 7% busy for the half minute they ran alone.
PKGS       ?= ./internal/controller/nodedrain ./test/stateful ./test/e2e ./test/install ./internal/dev/demo ./internal/dev/image ./internal/cli ./internal/dev/devcluster ./test/rbac ./test/monitoring ./...

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The user CLI is built as users download it (hack/dist): no cgo, no
# symbol tables, so bin/vacate is the plugin's size (docs/cli.md has it,
# checked by cmd/vacate's TestPluginArchiveIsSmallAndUserOnly).
CLI_BUILD  := CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w"

.PHONY: build
build: ## Build vacate, vacate-controller, vacate-agent, vacate-hook and the development tools vacate-dev into bin/
	$(GO) build -o $(BIN)/ ./cmd/vacate-controller ./cmd/vacate-agent ./cmd/vacate-hook ./cmd/vacate-dev
	$(CLI_BUILD) -o $(BIN)/vacate ./cmd/vacate

PREFIX     ?= $(HOME)/.local
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The version stamp of what make install builds (internal/version).
VERSION_PKG := github.com/vacate-dev/vacate/internal/version
STAMP      := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(shell git rev-parse HEAD 2>/dev/null) -X $(VERSION_PKG).date=$(shell git log -1 --format=%cI 2>/dev/null)

.PHONY: install
install: ## Install vacate (the user CLI, without the development tools), the same binary as the kubectl plugin kubectl-vacate, and its completion helper kubectl_complete-vacate, into $(PREFIX)/bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(STAMP)" -o $(BIN)/vacate ./cmd/vacate
	install -d $(PREFIX)/bin
	install -m 0755 $(BIN)/vacate $(PREFIX)/bin/vacate
	install -m 0755 $(BIN)/vacate $(PREFIX)/bin/kubectl-vacate
	install -m 0755 config/plugin/kubectl_complete-vacate $(PREFIX)/bin/kubectl_complete-vacate
	@echo "installed $(PREFIX)/bin/vacate, kubectl-vacate and kubectl_complete-vacate; with $(PREFIX)/bin on PATH, 'kubectl vacate --help' and 'kubectl vacate <TAB>' work"

.PHONY: dist
dist: ## Build kubectl-vacate archives per platform and their krew manifest into dist/
	$(GO) run ./hack/dist --version $(VERSION) --out dist

# Images (docs/install.md): built from Go alone, with no Docker engine and no
# base image to download; dated by the commit, so reproducible.
IMAGE_REPO ?= ghcr.io/vacate-dev
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64

.PHONY: images
images: ## Build the vacate-controller, vacate-agent and vacate-hook images (linux/amd64, linux/arm64) into dist/images: OCI layouts (crane push --index), docker load tarballs, SPDX SBOMs
	$(GO) run ./hack/image --version $(VERSION) --repo $(IMAGE_REPO) --platforms $(IMAGE_PLATFORMS) --out dist/images

# A release (docs/install.md, "Making a release"): the images with their
# SBOMs and the chart pushed to REGISTRY and signed with the cosign key
# COSIGN_KEY (its password in the environment's COSIGN_PASSWORD), and the
# release page's files in dist/release/VERSION (images named by digest,
# checksums.txt signed). Credentials come from Docker's configuration.
# UNSIGNED=1 makes a trial without signatures; `make release-key` a key for
# trials in KEY_DIR.
RELEASE_PLATFORMS ?= $(IMAGE_PLATFORMS)
CLI_PLATFORMS ?= linux/amd64,linux/arm64,darwin/amd64,darwin/arm64
COSIGN_KEY ?=
UNSIGNED ?=
KEY_DIR ?= dist/release-key

.PHONY: release
release: ## Make release VERSION=vX.Y.Z REGISTRY=host/path COSIGN_KEY=cosign.key (password in COSIGN_PASSWORD; UNSIGNED=1 for an unsigned trial): push and sign the images (with SBOMs) and the OCI chart; write the CLI archives, krew manifest, install.yaml, agent.yaml and recipes (by digest), signed checksums, public key and notes into dist/release/VERSION
	@[ "$(origin VERSION)" = "command line" ] || [ "$(origin VERSION)" = "environment" ] || { echo "make release: set VERSION=vX.Y.Z (and REGISTRY=..., COSIGN_KEY=...)"; exit 2; }
	$(GO) run ./hack/release --version $(VERSION) --registry "$(REGISTRY)" --platforms $(RELEASE_PLATFORMS) --cli-platforms $(CLI_PLATFORMS) $(if $(ALLOW_DIRTY),--allow-dirty) $(if $(COSIGN_KEY),--key "$(COSIGN_KEY)") $(if $(UNSIGNED),--unsigned)

.PHONY: release-key
release-key: ## Make a cosign key pair for trial releases: KEY_DIR/cosign.key (encrypted with COSIGN_PASSWORD) and KEY_DIR/cosign.pub (KEY_DIR defaults to dist/release-key)
	$(GO) run ./hack/release --generate-key "$(KEY_DIR)"

.PHONY: tools
tools: $(STATICCHECK) $(CONTROLLER_GEN) $(HELM_DOCS) $(ACTIONLINT) controlplane ## Build the developer tools and the pinned control plane

# K8S picks the Kubernetes minor of `make controlplane` and `make
# test-compat` (1.30, the oldest vacate supports, or 1.37, the default);
# the dev cluster reads it as $$VACATE_K8S_VERSION. docs/dev/compat.md.
K8S        ?=

.PHONY: controlplane
controlplane: ## Build (once, cached in ~/.cache/vacate) etcd, Kubernetes and kwok from source (K8S=1.30: that minor's)
	VACATE_K8S_VERSION=$(K8S) $(GO) run ./cmd/vacate-dev build

$(STATICCHECK): hack/tools/go.mod hack/tools/go.sum
	$(GO) -C hack/tools build -o $(TOOLS_BIN)/ honnef.co/go/tools/cmd/staticcheck

$(CONTROLLER_GEN): hack/tools/go.mod hack/tools/go.sum
	$(GO) -C hack/tools build -o $(TOOLS_BIN)/ sigs.k8s.io/controller-tools/cmd/controller-gen

$(HELM_DOCS): hack/tools/go.mod hack/tools/go.sum
	$(GO) -C hack/tools build -o $(TOOLS_BIN)/ github.com/norwoodj/helm-docs/cmd/helm-docs

$(ACTIONLINT): hack/tools/go.mod hack/tools/go.sum
	$(GO) -C hack/tools build -o $(TOOLS_BIN)/ github.com/rhysd/actionlint/cmd/actionlint

.PHONY: test
test: controlplane dbus-daemon stateful-servers ## Run the whole test suite with -race (starts real local control planes)
	@$(MAKE) --no-print-directory disk-check
	$(GO) test $(TEST_FLAGS) $(PKGS)

# A full disk fails the suite far from its cause: etcd cannot preallocate
# its WAL and every dev cluster's API server stops answering (CI saw it
# with 486 MB free). A fresh run takes about 8 GB (the race build cache)
# and 2 GB in the temporary directory; say so first when less is free.
DISK_NEEDED_GB ?= 10
.PHONY: disk-check
disk-check:
	@for d in "$$($(GO) env GOCACHE)" "$${TMPDIR:-/tmp}"; do \
		free=$$(df -Pk "$$d" | awk 'NR==2 {print int($$4/1024/1024)}'); \
		if [ "$$free" -lt $(DISK_NEEDED_GB) ]; then \
			echo "WARNING: only $${free} GB free where $$d is; the suite needs about $(DISK_NEEDED_GB) GB (build cache, dev clusters)."; \
			echo "WARNING: with less, etcd and the API servers fail with 'no space left on device' and many tests fail at once."; \
		fi; \
	done

# The compatibility suite (docs/dev/compat.md): test/compat (the API
# groups vacate calls are served, the server is the version asked for)
# and, from the other packages, the tests that prove a drain under PDBs,
# HTTP hooks and their callers' tokens, Evacuations, every admission
# policy refusing what it should, and the chart and kustomizations
# installing, all on a dev cluster of Kubernetes $(K8S). The old minors'
# modules are not in MODULES (make verify would download all of their
# Kubernetes): their tidiness is checked here, where they are used.
COMPAT_PKGS := ./test/compat ./test/rbac ./test/install ./test/e2e
COMPAT_RUN  := ^(TestCompat.*|TestServed.*|TestControlPlane.*|Test(Hook|Controller|Lease|ForceDelete|Users|Tenants|SurgeWithoutItsBinding|Deadlines|Evacuation|Overrides|Changing|Decommission|Finalizers|PolicyChange|NamedPolicy).*|TestChart.*|TestKustomizations|TestResumeAfterKillMidEvictions|TestResumeAfterKillMidEvacuation|TestSurgeOneReplicaKeepsAPodReady)$$
.PHONY: test-compat
test-compat: ## Run the compatibility suite on a dev cluster of Kubernetes K8S (make test-compat K8S=1.30)
	@test -n "$(K8S)" || { echo "make test-compat needs K8S, a supported minor: make test-compat K8S=1.30"; exit 1; }
	@if [ -d hack/controlplane-$(K8S) ]; then (cd hack/controlplane-$(K8S) && $(GO) mod tidy -diff) || { echo "go mod tidy needed in hack/controlplane-$(K8S)"; exit 1; }; fi
	VACATE_K8S_VERSION=$(K8S) $(GO) run ./cmd/vacate-dev build
	VACATE_K8S_VERSION=$(K8S) $(GO) test -tags compat $(TEST_FLAGS) $(COMPAT_PKGS) -run '$(COMPAT_RUN)'

# The 20-minute heartbeat limit of Kubernetes' EvictionRequest API is judged
# by the API server's own clock: proving that a stale heartbeat passes the
# turn on takes 20 real minutes, beyond the suite's budget.
.PHONY: test-stale-heartbeat
test-stale-heartbeat: controlplane ## Prove on the dev cluster that a responder silent for 20 minutes loses its turn and the next goes on (about 22 minutes)
	VACATE_STALE_HEARTBEAT=1 $(GO) test ./internal/controller/coordinator -run '^TestAStaleHeartbeatPassesTheTurnOn$$' -count=1 -timeout 40m -v

# The logind source's tests run a private D-Bus daemon (internal/dev/doubles/logindtest).
.PHONY: dbus-daemon
dbus-daemon: ## Install dbus-daemon (Debian package) for the logind tests, unless it is there
	@command -v dbus-daemon >/dev/null || { apt-get update && apt-get install -y --no-install-recommends dbus-daemon; }

# The real servers the recipes of examples/ are proven against
# (docs/recipes): RabbitMQ, PostgreSQL with Patroni, Redis with Sentinel,
# from Debian's packages. Their services are not started: each test starts
# the server processes it needs, one per simulated pod, on the pod's IP.
STATEFUL_PKGS := rabbitmq-server postgresql patroni redis-server redis-sentinel
.PHONY: stateful-servers
stateful-servers: ## Install the real servers the stateful recipes are tested against (Debian packages), unless they are there
	@missing=$$(for p in $(STATEFUL_PKGS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; done); \
	  if [ -n "$$missing" ]; then apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; fi

.PHONY: demo
demo: controlplane ## Run the demo on a throwaway local cluster
	$(GO) run ./cmd/vacate-dev demo

.PHONY: generate
generate: $(CONTROLLER_GEN) $(HELM_DOCS) ## Regenerate deepcopy code, CRDs (from api/), RBAC (from the controllers' markers), the webhook configuration, the Helm chart's copies and its README (helm-docs, from values.yaml)
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=vacate-controller paths="./internal/controller/...;./internal/webhook/..." output:rbac:artifacts:config=config/rbac
	$(GO) run ./hack/generate
	$(HELM_DOCS) --chart-search-root charts --sort-values-order file --skip-version-footer --log-level warning

.PHONY: fmt
fmt: ## Format the Go code
	gofmt -w $$(git ls-files '*.go')

# The hack/ modules are a few lines of wrappers around all of Kubernetes; vet
# checks them (from the build cache), staticcheck would analyse Kubernetes.
.PHONY: lint
lint: $(STATICCHECK) ## go vet on every module, staticcheck on vacate's own code
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@for m in hack/controlplane hack/kwok; do echo "go vet: $$m"; (cd $$m && $(GO) vet ./...); done

# The GitHub workflows (.github/workflows), checked by actionlint: syntax,
# expressions and their contexts, the actions' inputs, runner labels, job
# dependencies, untrusted input in scripts. Without shellcheck
# (-shellcheck=): it is no Go module, so it cannot be pinned as the other
# tools are, and actionlint would run whichever version a machine has, or
# none, and pass here and fail there; the workflows' scripts stay a few
# lines that call make. WORKFLOWS names other files (test/ci checks that a
# broken workflow fails this target).
WORKFLOWS ?= $(wildcard .github/workflows/*.yml .github/workflows/*.yaml)
.PHONY: lint-workflows
lint-workflows: $(ACTIONLINT) ## Lint the GitHub workflows with the pinned actionlint
	$(ACTIONLINT) -shellcheck= -pyflakes= $(WORKFLOWS)

.PHONY: verify
verify: generate lint lint-workflows ## Fail on unformatted code, untidy modules, vet or lint findings, workflow lint findings, or generated drift
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "go mod tidy needed in $$m"; exit 1; }; done
	@if [ -n "$$(git status --porcelain -- config api charts)" ]; then git status --short -- config api charts; echo "generated files differ from the commit: run make generate and commit"; exit 1; fi
	@echo "verify: ok"

# Benchmarks (docs/performance.md): `bench` and `bench-scale-fresh` start a
# fresh dev cluster for each run of each driver; `bench-scale` grows one
# cluster of SCALE_NODES nodes through the sizes of SCALE_PODS and writes
# its figures and plot into SCALE_OUT. BENCH_FLAGS adds or overrides flags,
# e.g. BENCH_FLAGS='-runs 1 -rows tight'.
BENCH_FLAGS ?=
SCALE_NODES ?= 1000
SCALE_PODS  ?= 1000,10000,30000
SCALE_OUT   ?= $(BIN)/bench-scale
FRESH_NODES ?= 200
FRESH_PODS  ?= 10000
SCALE_RUNS  ?= 1

.PHONY: bench
bench: controlplane ## Measure vacate against kubectl drain and a tight client: 20 nodes, drain 10, 3 runs each
	$(GO) run ./hack/bench $(BENCH_FLAGS)

.PHONY: bench-scale
bench-scale: controlplane ## One cluster of SCALE_NODES nodes grown to each of SCALE_PODS pods: vacate idle and draining 20 fresh nodes at each size, N kubectl and the tight client at the last; plot in SCALE_OUT
	$(GO) run ./hack/bench -scale -nodes $(SCALE_NODES) -scale-pods $(SCALE_PODS) -daemonsets 2 -drain 20 \
		-kcm-qps 100 -scheduler-qps 100 -scale-results $(SCALE_OUT)/results.json -plot $(SCALE_OUT)/scale.png $(BENCH_FLAGS)

.PHONY: bench-scale-fresh
bench-scale-fresh: controlplane ## bench on fresh clusters at scale: drain 10% of FRESH_NODES nodes with FRESH_PODS pods under maxParallelNodes 10%
	$(GO) run ./hack/bench -nodes $(FRESH_NODES) -pods $(FRESH_PODS) -daemonsets 2 -drain 10% -max-parallel 10% \
		-rows parallel,tight -runs $(SCALE_RUNS) -kcm-qps 100 $(BENCH_FLAGS)

.PHONY: bench-endpoints
bench-endpoints: controlplane ## Requests a drain drops: kubectl drain, vacate without and with the readiness gate (and surge), preStop sleep (needs root: a network namespace)
	$(GO) run ./hack/bench-endpoints $(BENCH_ENDPOINTS_FLAGS)

.PHONY: bench-stateful
bench-stateful: controlplane stateful-servers ## Real RabbitMQ, PostgreSQL (Patroni) and Redis (Sentinel) under client load: the leader's node drained by kubectl drain (with the operators' preStop) and by vacate with its recipe, and the only node of RabbitMQ classic queues decommissioned; writes lost, longest outage, drain time
	$(GO) test -tags stateful_bench -count=1 -v -timeout 60m -run TestBenchStateful ./test/stateful

.PHONY: bench-admission
bench-admission: ## Cost of one admission pass with 10, 100 and 1,000 queued drains (decisions/s, CPU per decision)
	$(GO) test -run '^$$' -bench BenchmarkAdmissionPass -benchtime 20x ./internal/controller/admission

.PHONY: bench-pods
bench-pods: ## Heap bytes per pod in the controller's pod cache, with and without its transform (10,000 realistic pods)
	$(GO) test -run '^$$' -bench BenchmarkPodCacheMemory -benchtime 1x ./internal/operator

.PHONY: clean
clean: ## Remove build output (not the cached control plane)
	rm -rf $(BIN)
