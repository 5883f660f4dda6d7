package integration

import (
	"context"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// containerStartTimeout bounds creating and starting one container.
const containerStartTimeout = 2 * time.Minute

// startRedisContainer starts a Redis container from redisImage() with
// testcontainers' Redis module and returns its URL ("redis://host:port",
// reachable from the test process). The container is removed when the test
// ends. It skips or fails as requireDocker does.
func startRedisContainer(t *testing.T) (url string) {
	t.Helper()
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()
	img := redisImage()
	c, err := tcredis.Run(ctx, img)
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("start Redis container from %q: %v\n"+
			"(no registry? build the local image with infra/redis-image/build.sh and set "+
			"KVROUTER_REDIS_IMAGE=kvrouter/redis-local:7 and TESTCONTAINERS_RYUK_DISABLED=true; `make test` does all that)",
			img, err)
	}
	url, err = c.ConnectionString(ctx)
	if err != nil {
		t.Fatalf("Redis container connection string: %v", err)
	}
	return url
}

func TestRedisContainer(t *testing.T) {
	url := startRedisContainer(t)
	t.Logf("Redis container (%s) at %s", redisImage(), url)
	c := newRedisClient(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if got, err := c.Do(ctx, c.B().Ping().Build()).ToString(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	if err := c.Do(ctx, c.B().Set().Key("kvrouter:probe").Value("ok").Build()).Error(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Do(ctx, c.B().Get().Key("kvrouter:probe").Build()).ToString(); err != nil || got != "ok" {
		t.Fatalf("GET = %q, %v", got, err)
	}
}
