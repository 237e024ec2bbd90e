# Sundial monorepo Makefile.
#
# The repository is a go.work workspace of several modules. `go test ./...` stops at
# module boundaries, so every per-module action loops over $(MODULES) or uses the
# pattern rules `test-<module>`, `vet-<module>`, `bench-<module>`, `tidy-<module>`.
#
# Knobs (make VAR=value):
#   RACE=1          -race for the unit-test modules (RACE_MODULES) in test, test-short and
#                   test-<module>; the default. RACE=0 turns it off. The tests module
#                   drives real processes and runs without it.
#   TESTFLAGS=...   extra flags for go test (e.g. TESTFLAGS='-run TestFailover -v')
#   BENCH=regexp    benchmarks to run in `make bench` (default: all)
#   BENCHTIME=1s    -benchtime for `make bench`
#   LOADTEST_ARGS=  arguments for bin/loadtest in `make loadtest` (default: --help)
#   CHAOS_DURATION=10m  fault time of `make chaos`; CHAOS_SEED=N reruns a seed's schedule
#   CHAOS_KILL_DURING_MOVES=0  `make chaos` without kills overlapping cluster operations
#   CHAOS_TLS=0         `make chaos` (and TestChaos) in plaintext; by default every internal hop uses TLS
#   CHAOS_AUTH=0        `make chaos` (and TestChaos) without authentication; by default proxies run --auth
#   LINT_MODULES="proto proxy"  modules `make lint` checks (default: all of MODULES)

SHELL       := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO      ?= go
MODULES := proto meta broker proxy shardctl proc loadtest tests
# Modules `make lint` checks (default: all; LINT_MODULES="proto proxy" for a few).
LINT_MODULES ?= $(MODULES)
BIN     := $(CURDIR)/bin
TOOLS   := $(BIN)/tools

# Main packages built by `make build`; each binary is named after its directory.
BINARIES := ./broker/cmd/sundial-broker ./proxy/cmd/sundial-proxy \
            ./shardctl/cmd/shardctl ./loadtest/cmd/loadtest ./proc/cmd/sundial-local

TEST_TIMEOUT ?= 20m
RACE         ?= 1
RACE_MODULES := proto meta broker proxy shardctl proc loadtest
race_flag     = $(if $(and $(filter 1 true yes,$(RACE)),$(filter $(1),$(RACE_MODULES))),-race,)
TESTFLAGS    ?=
BENCH        ?= .
BENCHTIME    ?= 1s
LOADTEST_ARGS ?= --help

# Tool versions. The protoc plugins must match the headers of the committed
# generated code, or `make verify` reports a diff.
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
PROTOC_GEN_OPENAPIV2_VERSION := v2.33.0
STATICCHECK_VERSION        := latest
GOLANGCI_LINT_VERSION      := v2.15.0

PROTO_FILES := sundial/v1/sundial.proto sundial/v1/auth.proto sundial/v1/backup.proto sundial/broker/v1/broker.proto sundial/broker/v1/peer.proto sundial/broker/v1/authsync.proto
# The broker's private storage format (Raft commands and Pebble records): generated
# next to the .proto, paths relative to the repository root.
BROKER_PROTO_FILES := broker/internal/fsm/fsmpb/fsm.proto
broker_proto_gen = PATH="$(TOOLS):$$PATH" protoc -I . --go_out=$(1) --go_opt=paths=source_relative $(BROKER_PROTO_FILES)

# The per-module pattern targets (test-%, vet-%, bench-%, tidy-%) are deliberately not
# listed: make skips pattern-rule search for .PHONY targets.
.PHONY: help build test test-short lint gen verify run screenshots join restart-broker restart-proxy bench loadtest clean tools tools-lint bench-peers bench-backup chaos

help: ## Show this list of targets
	@echo "Sundial make targets:"
	@grep -hE '^[a-zA-Z0-9_%-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  %-14s %s\n", $$1, $$2}'
	@echo
	@echo "Modules: $(MODULES)   Knobs: RACE=1 TESTFLAGS=... BENCH=... LOADTEST_ARGS=..."

build: ## Build sundial-broker, sundial-proxy, shardctl, loadtest and sundial-local into bin/
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(BINARIES)

# `make test` runs every module even when one fails, then fails if any did. go test's
# own output is printed unfiltered.
test: ## Run the whole test suite, module by module (unit modules with -race; RACE=0 without)
	@failed=""; \
	for m in $(MODULES); do \
	  if [ -z "$$(cd $$m && $(GO) list -e ./... 2>/dev/null)" ]; then echo "=== module $$m: no packages yet, skipped"; continue; fi; \
	  race=""; case " $(RACE_MODULES) " in *" $$m "*) [ -n "$(call race_flag,$(firstword $(RACE_MODULES)))" ] && race=-race;; esac; \
	  echo "=== module $$m: go test -count=1 -timeout $(TEST_TIMEOUT) $$race $(TESTFLAGS) ./..."; \
	  (cd $$m && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $$race $(TESTFLAGS) ./...) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAIL: go test failed in module(s):$$failed"; exit 1; fi; \
	echo "PASS: all modules ($(MODULES))"

test-short: ## Run the quick tests only (go test -short) in every module
	@$(MAKE) --no-print-directory test TESTFLAGS="-short $(TESTFLAGS)"

test-%: ## Run the tests of one module, e.g. make test-broker
	cd $* && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(call race_flag,$*) $(TESTFLAGS) ./...

# `make lint` checks every module of LINT_MODULES with every linter, then fails if any
# did. golangci-lint (pinned, `make tools-lint`) is required when CI is set; elsewhere a
# missing one is skipped with a note. --allow-serial-runners queues concurrent runs on
# a shared machine instead of failing them.
lint: ## gofmt check, go vet, staticcheck/golangci-lint per module (LINT_MODULES="proto proxy")
	@echo "gofmt -l $(LINT_MODULES)"; \
	bad=$$(gofmt -l $(LINT_MODULES)); \
	if [ -n "$$bad" ]; then echo "gofmt would reformat:"; echo "$$bad"; echo "run: gofmt -w $(LINT_MODULES)"; exit 1; fi
	@$(MAKE) --no-print-directory $(addprefix vet-,$(LINT_MODULES))
	@if [ -x $(TOOLS)/staticcheck ]; then \
	  failed=""; \
	  for m in $(LINT_MODULES); do echo "staticcheck ($$m)"; (cd $$m && $(TOOLS)/staticcheck ./...) || failed="$$failed $$m"; done; \
	  if [ -n "$$failed" ]; then echo "FAIL: staticcheck found issues in module(s):$$failed"; exit 1; fi; \
	else echo "staticcheck: skipped (not in bin/tools; run make tools)"; fi
	@if [ -x $(TOOLS)/golangci-lint ]; then \
	  failed=""; \
	  for m in $(LINT_MODULES); do \
	    echo "golangci-lint ($$m)"; \
	    (cd $$m && $(TOOLS)/golangci-lint run --allow-serial-runners ./...) || failed="$$failed $$m"; \
	  done; \
	  if [ -n "$$failed" ]; then echo "FAIL: golangci-lint found issues in module(s):$$failed"; exit 1; fi; \
	elif [ -n "$${CI:-}" ]; then echo "lint: golangci-lint is not in bin/tools (CI requires it: run make tools-lint)"; exit 1; \
	else echo "golangci-lint: skipped (not in bin/tools; run make tools-lint)"; fi
	@echo "lint: OK ($(LINT_MODULES))"

vet-%:
	@echo "go vet ($*)"
	@cd $* && $(GO) vet ./...

tools: ## Install staticcheck, protoc-gen-go, protoc-gen-go-grpc and protoc-gen-openapiv2 into bin/tools
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	GOBIN=$(TOOLS) $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(PROTOC_GEN_OPENAPIV2_VERSION)

# tools-lint skips the (slow) build when bin/tools already holds the pinned version.
tools-lint: ## Install the pinned golangci-lint into bin/tools (takes a few minutes; skipped when current)
	@have=$$($(TOOLS)/golangci-lint version 2>/dev/null || true); \
	if [[ $$have == *"version $(GOLANGCI_LINT_VERSION:v%=%) "* ]]; then \
	  echo "golangci-lint $(GOLANGCI_LINT_VERSION) already in bin/tools"; \
	else \
	  mkdir -p $(TOOLS); \
	  echo "GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)"; \
	  GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); \
	fi

$(TOOLS)/protoc-gen-go:
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(TOOLS)/protoc-gen-go-grpc:
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

$(TOOLS)/protoc-gen-openapiv2:
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(PROTOC_GEN_OPENAPIV2_VERSION)

# openapi_gen writes the OpenAPI (Swagger 2.0) document of the public API, generated
# from the google.api.http annotations of $(OPENAPI_PROTO), to $(1)/openapi.json;
# proto/openapi.yaml sets the document's title, version and description.
OPENAPI_PROTO := sundial/v1/sundial.proto sundial/v1/backup.proto
OPENAPI_OUT   := proxy/internal/httpapi/openapi.json
openapi_gen = PATH="$(TOOLS):$$PATH" protoc -I proto -I proto/third_party -I /usr/include \
	  --openapiv2_out=$(1) \
	  --openapiv2_opt=allow_merge=true,merge_file_name=openapi,output_format=json,openapi_configuration=proto/openapi.yaml \
	  $(OPENAPI_PROTO) && mv $(1)/openapi.swagger.json $(1)/openapi.json

gen: $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/protoc-gen-openapiv2 ## Regenerate the protobuf Go code (proto/gen, broker/internal/fsm/fsmpb) and the OpenAPI document (needs protoc)
	@if ! command -v protoc >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "protoc not found: installing Debian's protobuf-compiler"; \
	    apt-get install -y protobuf-compiler || { apt-get update && apt-get install -y protobuf-compiler; }; \
	  else \
	    echo "make gen needs protoc (and the well-known types in /usr/include/google/protobuf)."; \
	    echo "Install it, e.g. 'sudo apt-get install -y protobuf-compiler', then run make gen again."; \
	    exit 1; \
	  fi; \
	fi
	@mkdir -p proto/gen
	PATH="$(TOOLS):$$PATH" protoc -I proto -I proto/third_party -I /usr/include \
	  --go_out=proto/gen --go_opt=paths=source_relative \
	  --go-grpc_out=proto/gen --go-grpc_opt=paths=source_relative \
	  $(PROTO_FILES)
	$(call broker_proto_gen,.)
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(call openapi_gen,$$tmp); \
	cp $$tmp/openapi.json $(OPENAPI_OUT)

tidy-%:
	@echo "go mod tidy ($*)"
	@cd $* && GOWORK=off $(GO) mod tidy

# verify writes nothing: generated code is regenerated into a temporary directory and
# compared, go.mod/go.sum are checked with `go mod tidy -diff`, formatting with gofmt -l.
verify: $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/protoc-gen-openapiv2 ## Fail if generated code, go.mod/go.sum or formatting are not current, or the tree holds binaries (writes nothing)
	@bash scripts/check-tree.sh
	@bad=$$(gofmt -l $(MODULES)); \
	if [ -n "$$bad" ]; then echo "verify: gofmt would reformat:"; echo "$$bad"; echo "run: gofmt -w $(MODULES)"; exit 1; fi
	@for m in $(MODULES); do \
	  (cd $$m && GOWORK=off $(GO) mod tidy -diff >/dev/null) || { echo "verify: go.mod/go.sum of $$m are not tidy: run make tidy-$$m"; exit 1; }; \
	done
	@if ! command -v protoc >/dev/null 2>&1; then echo "verify: protoc not found (make gen installs it on Debian as root)"; exit 1; fi
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	PATH="$(TOOLS):$$PATH" protoc -I proto -I proto/third_party -I /usr/include \
	  --go_out=$$tmp --go_opt=paths=source_relative \
	  --go-grpc_out=$$tmp --go-grpc_opt=paths=source_relative $(PROTO_FILES); \
	if ! diff -r $$tmp proto/gen >/dev/null; then echo "verify: proto/gen is stale: run make gen and commit"; diff -r $$tmp proto/gen | head -20; exit 1; fi
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(call broker_proto_gen,$$tmp); \
	for f in $(BROKER_PROTO_FILES:.proto=.pb.go); do \
	  if ! diff $$tmp/$$f $$f >/dev/null; then echo "verify: $$f is stale: run make gen and commit"; diff $$tmp/$$f $$f | head -20; exit 1; fi; \
	done
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(call openapi_gen,$$tmp); \
	if ! diff $$tmp/openapi.json $(OPENAPI_OUT) >/dev/null; then echo "verify: $(OPENAPI_OUT) is stale: run make gen and commit"; diff $$tmp/openapi.json $(OPENAPI_OUT) | head -20; exit 1; fi
	@echo "verify: OK (generated code, go.mod/go.sum and formatting are current; no binaries)"

# sundial-local (proc/cmd/sundial-local) starts the servers from bin/ (the brokers the
# data dir holds: bootstrap ones, joined ones, never a removed one), waits for the
# proxy's /readyz, prints the endpoints; Ctrl-C stops every process by pid.
run: build ## Build, then run a local cluster: 3 brokers + proxy (SUNDIAL_BROKERS=1 for one broker, SUNDIAL_SECURE=1 for TLS and tokens)
	$(BIN)/sundial-local

screenshots: ## Write PNGs of the admin UI's pages into docs/images (a test cluster and headless chromium)
	cd tests && SUNDIAL_SCREENSHOTS=$(CURDIR)/docs/images $(GO) test -count=1 -timeout 5m -run '^TestScreenshots$$' ./ui/

# `make join` (from another shell, while `make run` runs) starts one more broker that
# joins that cluster, on the next free ports of the local scheme (gRPC 7500+i, Raft
# 7600+i, metrics 7700+i, admin 7800+i), data in <its data dir>/broker-i; Ctrl-C stops it. It finds
# the cluster that runs (./data/local or ./data/local-N) unless SUNDIAL_LOCAL_DIR or
# SUNDIAL_BROKERS says which.
# `make join WAIT=1` starts it in the waiting state instead (--wait-for-add): it
# prints the `bin/shardctl add-node ADDR` command that adds it to the cluster.
WAIT ?=
join: build ## Start one more broker that joins the running `make run` cluster (WAIT=1: wait for shardctl add-node)
	$(BIN)/sundial-local join$(if $(filter 1 true yes,$(WAIT)), --wait,)

# `make restart-broker N=2` / `make restart-proxy` (from another shell) ask the
# running `make run` to start an exited broker / the proxy again, with its first
# arguments and data; the run keeps owning it (Ctrl-C there stops it too).
N ?=
restart-broker: ## Start broker N of the running `make run` again after it died (make restart-broker N=2)
	@if [ -z "$(N)" ]; then echo "usage: make restart-broker N=<broker number>"; exit 2; fi
	@test -x $(BIN)/sundial-local || { echo "bin/sundial-local is missing: run make build"; exit 1; }
	$(BIN)/sundial-local restart $(N)

restart-proxy: ## Start the proxy of the running `make run` again after it died
	@test -x $(BIN)/sundial-local || { echo "bin/sundial-local is missing: run make build"; exit 1; }
	$(BIN)/sundial-local restart proxy

# `make chaos` runs tests/chaos's TestChaos: the recorded workload under a seeded
# fault schedule, then heal, drain and check. The seed is printed first; the
# history of a failing run is written to data/chaos/history-<seed>.jsonl, its
# process logs to data/chaos/logs-<seed>/.
CHAOS_DURATION ?= 10m
CHAOS_SEED     ?=

chaos: build ## Run the workload under seeded faults and check the history (CHAOS_DURATION=10m CHAOS_SEED=...)
	@seed="$(CHAOS_SEED)"; [ -n "$$seed" ] || seed=$$(date +%s%N); \
	echo "chaos: seed $$seed duration $(CHAOS_DURATION)"; \
	cd tests && SUNDIAL_BIN_DIR=$(BIN) CHAOS_SEED=$$seed CHAOS_DURATION=$(CHAOS_DURATION) \
	  CHAOS_HISTORY=$(CURDIR)/data/chaos/history-$$seed.jsonl SUNDIAL_KEEP_LOGS=$(CURDIR)/data/chaos/logs-$$seed \
	  $(GO) test -count=1 -v -timeout 3h -run '^TestChaos$$' ./chaos/

bench: ## Run Go benchmarks in every module (BENCH=regexp, BENCHTIME=1s)
	@failed=""; \
	for m in $(MODULES); do \
	  if [ -z "$$(cd $$m && $(GO) list -e ./... 2>/dev/null)" ]; then echo "=== module $$m: no packages yet, skipped"; continue; fi; \
	  echo "=== module $$m: go test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) ./..."; \
	  (cd $$m && $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) -timeout $(TEST_TIMEOUT) ./...) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAIL: benchmarks failed in module(s):$$failed"; exit 1; fi

bench-%: ## Run the benchmarks of one module, e.g. make bench-broker
	cd $* && $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) -timeout $(TEST_TIMEOUT) ./...

loadtest: ## Build bin/loadtest and print its help (LOADTEST_ARGS='...' to run a scenario)
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/loadtest ./loadtest/cmd/loadtest
	$(BIN)/loadtest $(LOADTEST_ARGS)

# BENCH_PEERS_ARGS passes extra flags to `loadtest bench`, e.g.
# BENCH_PEERS_ARGS='--backlog-messages 10000000 --backlog-max-fill 10m' for the 10M backlog.
BENCH_PEERS_ARGS ?=

bench-peers: ## Install the peers, then run every scenario on Sundial (RF 3 and RF 1) and each peer, with CPU per 1M msgs; writes docs/benchmarks.md (~20 min)
	bash scripts/install-peers.sh
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./broker/cmd/sundial-broker ./proxy/cmd/sundial-proxy ./loadtest/cmd/loadtest
	$(GO) test -c -o $(BIN)/raftceiling.test ./broker/internal/host
	PATH="$(TOOLS):$$PATH" $(BIN)/loadtest bench --bin-dir $(BIN) --out docs/benchmarks.md \
	  --svg docs/benchmarks-lateness.svg --json $(BIN)/benchmarks.json --raft-ceiling $(BIN)/raftceiling.test $(BENCH_PEERS_ARGS)

# BENCH_BACKUP_ARGS passes extra flags to `loadtest backup`, e.g. '--messages 100000' or
# '--restore=false'.
BENCH_BACKUP_ARGS ?=

bench-backup: ## Fill 1M pending messages (RF 3), time a full and an incremental backup and a restore; prints them against the targets, JSON in bin/backup-bench.json (~5 min)
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./broker/cmd/sundial-broker ./proxy/cmd/sundial-proxy ./loadtest/cmd/loadtest
	$(BIN)/loadtest backup --bin-dir $(BIN) --json $(BIN)/backup-bench.json $(BENCH_BACKUP_ARGS)

clean: ## Remove bin/ and data/ (including the local cluster's data)
	rm -rf $(BIN) $(CURDIR)/data
