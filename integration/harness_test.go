// Package integration holds end-to-end tests with real components: Redis in
// Docker containers (testcontainers-go), real redis-server processes
// (internal/testredis), and the kvrouter binaries.
//
// Running them:
//
//	make test   # builds the local Redis image, sets the variables below
//
// or by hand:
//
//	infra/redis-image/build.sh   # kvrouter/redis-local:7, no registry needed
//	TESTCONTAINERS_RYUK_DISABLED=true KVROUTER_REDIS_IMAGE=kvrouter/redis-local:7 \
//	    go test ./integration/...
//
// Environment:
//   - TESTCONTAINERS_RYUK_DISABLED=true is required where the Ryuk reaper
//     image cannot be pulled (our machines: no registry). It must be set
//     before the test binary starts (testcontainers reads its configuration
//     once); every container is removed by testcontainers.CleanupContainer.
//   - KVROUTER_REDIS_IMAGE names the Redis image (default "redis:7").
//   - TESTCONTAINERS_HOST_OVERRIDE: where published ports are reached. When
//     unset, TestMain sets it to "localhost" if the Docker daemon is local
//     (see useLocalDockerHost).
//   - CI set: a missing Docker engine or redis-server fails the tests
//     instead of skipping them.
//
// All tests here skip in -short mode.
package integration

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"github.com/testcontainers/testcontainers-go"
)

func TestMain(m *testing.M) {
	useLocalDockerHost()
	os.Exit(m.Run())
}

// useLocalDockerHost sets TESTCONTAINERS_HOST_OVERRIDE=localhost when it is
// unset, Docker is reached through a unix socket and the daemon's default
// bridge (docker0) is an interface of this network namespace.
//
// Why: where /.dockerenv exists, testcontainers assumes it runs in a sibling
// container and reaches published ports through the default route's gateway.
// Our machines have /.dockerenv (the sandbox is a container) but run the
// daemon inside it, so that gateway leads nowhere and every wait strategy
// times out; the ports are on localhost. It runs before any test, so the
// variable is in place before testcontainers first reads it.
func useLocalDockerHost() {
	if _, set := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); set {
		return
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" && !strings.HasPrefix(h, "unix://") {
		return
	}
	if _, err := net.InterfaceByName("docker0"); err != nil {
		return
	}
	_ = os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "localhost")
}

// defaultRedisImage is used when KVROUTER_REDIS_IMAGE is unset.
const defaultRedisImage = "redis:7"

// inCI reports whether the tests run in CI (env CI set), where missing
// infrastructure is a failure, not a reason to skip.
func inCI() bool { return os.Getenv("CI") != "" }

// redisImage returns the Redis image for containers: $KVROUTER_REDIS_IMAGE
// or "redis:7".
func redisImage() string {
	if img := os.Getenv("KVROUTER_REDIS_IMAGE"); img != "" {
		return img
	}
	return defaultRedisImage
}

// requireIntegration skips the test in -short mode.
func requireIntegration(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped in -short mode")
	}
}

// requireDocker skips the test (in -short mode, or when no Docker engine is
// reachable) — or fails it when CI is set and the engine is missing. It also
// fails in CI when Ryuk is enabled, since its image cannot be pulled there.
func requireDocker(t *testing.T) {
	t.Helper()
	requireIntegration(t)
	if !inCI() {
		testcontainers.SkipIfProviderIsNotHealthy(t)
		return
	}
	if !testcontainers.ReadConfig().RyukDisabled {
		t.Fatal("CI: set TESTCONTAINERS_RYUK_DISABLED=true (make test does): the Ryuk image cannot be pulled here")
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("CI: Docker engine not usable (panic: %v)", r)
			}
		}()
		provider, err := testcontainers.ProviderDefault.GetProvider()
		if err != nil {
			t.Fatalf("CI: Docker engine not reachable: %v", err)
		}
		t.Cleanup(func() { _ = provider.Close() })
		if err := provider.Health(context.Background()); err != nil {
			t.Fatalf("CI: Docker engine not healthy: %v", err)
		}
	}()
}

// newRedisClient returns a rueidis client for a redis:// URL (a standalone
// server or, with comma-separated seeds, a cluster), closed by t.Cleanup.
func newRedisClient(t *testing.T, url string) rueidis.Client {
	t.Helper()
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %q: %v", url, err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(c.Close)
	return c
}
