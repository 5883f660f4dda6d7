# kvrouter — build, test and lint entry points. CI runs `make lint` and `make test` (see .ci/run).

SHELL := /bin/bash
GO ?= go

# Redis image for the testcontainers tests in integration/. Without a
# registry it is built locally from the host's redis-server
# (infra/redis-image/build.sh); set KVROUTER_REDIS_IMAGE=redis:7 where you can pull.
REDIS_LOCAL_IMAGE ?= kvrouter/redis-local:7

# Extra flags for `make demo`, e.g. DEMO_ARGS="--out demo.svg --rho-levels 0.5".
DEMO_ARGS ?=

# Environment for test runs: Ryuk's image cannot be pulled here, so it is off
# (every container is removed by testcontainers.CleanupContainer instead).
TEST_ENV = TESTCONTAINERS_RYUK_DISABLED=true KVROUTER_REDIS_IMAGE=$${KVROUTER_REDIS_IMAGE:-$(REDIS_LOCAL_IMAGE)}

# Per-target time of `make fuzz-smoke` (a go test -fuzztime value).
FUZZTIME ?= 8s

.PHONY: build test test-valkey test-short test-chaos fuzz-smoke bench lint demo redis-image clean

## build: the kvrouter CLI into bin/kvrouter
build:
	$(GO) build -o bin/kvrouter ./cmd/kvrouter

## redis-image: build the local Redis image (skipped if it exists; FORCE=1 rebuilds)
redis-image:
	bash infra/redis-image/build.sh $(REDIS_LOCAL_IMAGE)

## test: the full suite, including real Redis processes and Docker containers.
## First scripts/test-setup.sh installs what is missing (as root, apt-get) or stops with the command to
## run; then the Docker Redis image is built if Docker works; then `go test -json` goes through
## scripts/testsummary, which prints the usual package lines and, at the end, every skipped test with
## its reason (under CI a skip that is not on scripts/testsummary/optional_skips.txt fails the run).
## Then test-valkey (the Redis suites again on Valkey); under CI, fuzz-smoke.
test:
	@bash scripts/test-setup.sh
	@if [ -z "$${KVROUTER_REDIS_IMAGE:-}" ] && command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then \
		echo "bash infra/redis-image/build.sh $(REDIS_LOCAL_IMAGE)"; \
		bash infra/redis-image/build.sh $(REDIS_LOCAL_IMAGE); \
	fi
	@$(GO) build -o bin/testsummary ./scripts/testsummary
	set -o pipefail; $(TEST_ENV) $(GO) test -json -count=1 -timeout 45m ./... | bin/testsummary
	@$(MAKE) --no-print-directory test-valkey VALKEY_SETUP=
	@if [ -n "$${CI:-}" ]; then $(MAKE) --no-print-directory fuzz-smoke; fi

# The packages whose tests run on a server of internal/testredis (standalone and cluster; the container
# suites in integration/ use the Redis image instead).
VALKEY_PKGS = ./statestore/ ./luascripts/ ./server/ ./functions/ ./internal/bench/ ./cmd/kvrouter/ ./cmd/lambda-local/

## test-valkey: SPEC §8 says kvrouter works on Valkey as on Redis ≥ 7.0: the packages whose tests run real
## servers (VALKEY_PKGS: the differential and replay suites, cluster, Functions reload, the HTTP server)
## run again with KVROUTER_REDIS_SERVER set to valkey-server (scripts/test-setup.sh installs it; on Debian 12
## from bookworm-backports). KVROUTER_VALKEY_SERVER picks another binary. Without one it says SKIPPED and
## passes, except under CI, where it fails.
# VALKEY_SETUP: the set-up test-valkey runs first; `make test` has run it already and passes it empty.
VALKEY_SETUP ?= bash scripts/test-setup.sh
test-valkey:
	@$(VALKEY_SETUP)
	@$(GO) build -o bin/testsummary ./scripts/testsummary
	@v="$${KVROUTER_VALKEY_SERVER:-$$(command -v valkey-server || true)}"; \
	if [ -z "$$v" ]; then \
		if [ -n "$${CI:-}" ]; then echo "test-valkey: no valkey-server (scripts/test-setup.sh could not install it)" >&2; exit 1; fi; \
		echo "test-valkey: SKIPPED, no valkey-server here (scripts/test-setup.sh says how to install it)"; exit 0; \
	fi; \
	echo "test-valkey: $$v ($$("$$v" --version))"; \
	set -o pipefail; KVROUTER_REDIS_SERVER="$$v" $(GO) test -json -count=1 -timeout 20m $(VALKEY_PKGS) | bin/testsummary

## fuzz-smoke: every fuzz target (found by scripts/fuzz-smoke.sh) for FUZZTIME each, one at a time
## (9 targets × 8 s plus their builds ≈ 2 min); each must have a committed seed corpus in testdata/fuzz/FuzzXxx/
fuzz-smoke:
	GO=$(GO) bash scripts/fuzz-smoke.sh $(FUZZTIME)

## test-chaos: only the container chaos suite (integration/chaos, also part of `make test`): serve, ingest,
## mock engines and Redis in Docker, killed and cut off under load; prints each scenario's numbers
## (docs/RELIABILITY.md "Chaos scenarios"). It builds the kvrouter image itself (infra/kvrouter-image).
test-chaos:
	bash infra/redis-image/build.sh $(REDIS_LOCAL_IMAGE)
	set -o pipefail; $(TEST_ENV) $(GO) test -count=1 -v -timeout 20m -run '^TestChaos' ./integration/chaos/ 2>&1 | \
		grep -v -e '🐳' -e '✅' -e '⏳' -e '🔔' -e '🚫'

## test-short: quick tests only (integration tests skip in -short mode)
test-short:
	$(GO) test -short -count=1 ./...

## bench: run every benchmark once (a smoke test, not a measurement)
bench:
	$(TEST_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x -count=1 ./...

## lint: gofmt must report nothing, go vet must pass, luacheck (Debian lua-check; scripts/test-setup.sh
## --lint installs it) must find nothing in luascripts/*.lua (.luacheckrc: Redis's Lua 5.1 globals)
lint:
	@files=$$(find . -name '*.go' -not -path './vendor/*' -not -path '*/testdata/*' -not -path './.git/*' | sort); \
	unformatted=$$([ -z "$$files" ] || gofmt -l $$files); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@command -v luacheck >/dev/null || { echo "luacheck missing: run bash scripts/test-setup.sh --lint (Debian package lua-check)"; exit 1; }
	luacheck --quiet --codes luascripts/

## demo: the one-command showcase (SPEC §2): builds bin/kvrouter, then runs `kvrouter demo` on the
## trace embedded in the binary (writes demo.png)
demo:
	@echo "building kvrouter into bin/kvrouter (a first run compiles ~500 packages: one to a few minutes)…"
	@set -o pipefail; $(GO) build -v -o bin/kvrouter ./cmd/kvrouter 2>&1 | \
		awk '/^#|^go: |:[0-9]+:/ { print; next } { n++; if (n % 50 == 0) { printf "  … %d packages compiled\n", n; fflush() } }'
	@echo "running bin/kvrouter demo$(if $(DEMO_ARGS), $(DEMO_ARGS)) (the Mooncake conversation trace embedded in the binary; about 10-30 s)…"
	./bin/kvrouter demo $(DEMO_ARGS)

clean:
	rm -rf bin
