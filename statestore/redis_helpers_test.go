package statestore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

var nsCounter atomic.Int64

// newRedisStore returns a Redis store on addrs with a fresh key prefix, closed by t.Cleanup.
func newRedisStore(t testing.TB, addrs ...string) *statestore.Redis {
	t.Helper()
	return newRedisStorePrefix(t, fmt.Sprintf("t%d:", nsCounter.Add(1)), addrs...)
}

// newRedisStorePrefix returns a Redis store with its own client on the given key prefix.
func newRedisStorePrefix(t testing.TB, prefix string, addrs ...string) *statestore.Redis {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("redis client: %v", err)
	}
	st, err := statestore.NewRedis(c, statestore.RedisOptions{Name: "redis://" + addrs[0], Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// sharedRedis starts one standalone server for the calling test.
func sharedRedis(t testing.TB) *testredis.Server { return testredis.Start(t) }

// bothStores is a fresh embedded store and a Redis store on a server of the calling test's own, by name:
// the set-up of the tests that run one scenario on both.
func bothStores(t testing.TB) map[string]statestore.Store {
	return map[string]statestore.Store{"memory": statestore.NewMemory(), "redis": newRedisStore(t, sharedRedis(t).Addr())}
}
