package statestore

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/internal/testredis"
)

// newInternalRedis starts a Redis for t and returns a Redis store on it under prefix (for the package's
// internal tests, which read the store's counters and keys) with its client, closed at cleanup.
func newInternalRedis(t testing.TB, prefix string) (*Redis, rueidis.Client) {
	t.Helper()
	srv := testredis.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	rs, err := NewRedis(c, RedisOptions{Name: "redis://" + srv.Addr(), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return rs, c
}
