# kvrouter — build, test and lint entry points. CI runs `make lint` and `make test` (see .ci/run).

SHELL := /bin/bash
GO ?= go

# Redis image for the testcontainers tests in integration/. Without a
# registry it is built locally from the host's redis-server
# (infra/redis-image/build.sh); set KVROUTER_REDIS_IMAGE=redis:7 where you can pull.
REDIS_LOCAL_IMAGE ?= kvrouter/redis-local:7

# Environment for test runs: Ryuk's image cannot be pulled here, so it is off
# (every container is removed by testcontainers.CleanupContainer instead).
TEST_ENV = TESTCONTAINERS_RYUK_DISABLED=true KVROUTER_REDIS_IMAGE=$${KVROUTER_REDIS_IMAGE:-$(REDIS_LOCAL_IMAGE)}

.PHONY: build test test-short bench lint demo redis-image clean

## build: the kvrouter CLI into bin/kvrouter
build:
	$(GO) build -o bin/kvrouter ./cmd/kvrouter

## redis-image: build the local Redis image (skipped if it exists; FORCE=1 rebuilds)
redis-image:
	bash infra/redis-image/build.sh $(REDIS_LOCAL_IMAGE)

## test: the full suite, including real Redis processes and Docker containers
test:
	@if [ -z "$${KVROUTER_REDIS_IMAGE:-}" ] && command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then \
		echo "bash infra/redis-image/build.sh $(REDIS_LOCAL_IMAGE)"; \
		bash infra/redis-image/build.sh $(REDIS_LOCAL_IMAGE); \
	fi
	$(TEST_ENV) $(GO) test -count=1 -timeout 45m ./...

## test-short: quick tests only (integration tests skip in -short mode)
test-short:
	$(GO) test -short -count=1 ./...

## bench: run every benchmark once (a smoke test, not a measurement)
bench:
	$(TEST_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x -count=1 ./...

## lint: gofmt must report nothing, go vet must pass
lint:
	@files=$$(find . -name '*.go' -not -path './vendor/*' -not -path '*/testdata/*' -not -path './.git/*' | sort); \
	unformatted=$$([ -z "$$files" ] || gofmt -l $$files); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

## demo: the one-command showcase (SPEC §2)
demo:
	$(GO) run ./cmd/kvrouter demo

clean:
	rm -rf bin
