package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestIngestAndRegisterDrivers: on the embedded store and on a real Redis, ingest reports blocks/s and
// memory per entry (and Redis CPU per block on Redis), register reports every slice, each over the
// repeats; the fresh namespaces are deleted afterwards.
func TestIngestAndRegisterDrivers(t *testing.T) {
	ctx := context.Background()
	srv := testredis.Start(t)
	// The embedded store first, in a fixed order: its memory figure is this process's heap growth, and a
	// Redis client closed just before (its connection goroutines still exiting, their buffers freed during
	// the load) once made that growth negative (-1.3 MB) when map order put Redis first.
	stores := []struct {
		name string
		open func() (statestore.Store, error)
	}{
		{"memory", func() (statestore.Store, error) { return statestore.NewMemory(), nil }},
		{"redis", func() (statestore.Store, error) {
			return statestore.Open(srv.URL(), statestore.OpenOptions{Fresh: true})
		}},
	}
	for _, s := range stores {
		name, open := s.name, s.open
		var log strings.Builder
		// 8,192 blocks (~0.9 MB on the embedded store): well above the heap's noise.
		ing, err := RunIngest(ctx, open, IngestOptions{Workers: 4, Blocks: 8192, Chain: 64, Replicas: 1, Clients: 2, Repeat: 2, Log: &log})
		if err != nil {
			t.Fatalf("%s ingest: %v", name, err)
		}
		if len(ing.Runs) != 2 || ing.Runs[1].BlocksApplied != 8192 || ing.Summary.BytesPerEntry.Median <= 0 || ing.Summary.BlocksPerS.Min <= 0 {
			t.Errorf("%s ingest %+v", name, ing)
		}
		if (name == "redis") != (ing.Summary.RedisCPUus.Median > 0 && ing.Summary.BlocksPerCoreS.Median > 0) {
			t.Errorf("%s ingest: Redis CPU %+v", name, ing.Summary.RedisCPUus)
		}
		wantKeys(t, "ingest summary", jsonKeys(t, ing, "summary"), "blocks_per_s", "bytes_per_entry", "redis_cpu_us_per_block", "blocks_per_redis_core_s", "loadavg_1m")
		reg, err := RunRegister(ctx, open, RegisterOptions{Workers: 40, Slice: 16, Repeat: 2, Log: &log})
		if err != nil {
			t.Fatalf("%s register: %v", name, err)
		}
		if len(reg.Slices) != 3 || reg.Slices[2].From != 32 || reg.Slices[2].To != 40 || reg.WallLastOverFirst <= 0 || len(reg.Runs) != 2 {
			t.Errorf("%s register %+v", name, reg)
		}
		if (name == "redis") != (reg.RedisCPULastOverFirst > 0) {
			t.Errorf("%s register: Redis CPU ratio %v", name, reg.RedisCPULastOverFirst)
		}
		if !strings.Contains(log.String(), "bytes/entry") || !strings.Contains(log.String(), "wall µs/registration") {
			t.Errorf("%s text:\n%s", name, log.String())
		}
	}
	if n, err := srv.Do(5*time.Second, "DBSIZE"); err != nil || n != "0" {
		t.Errorf("DBSIZE = %q, %v; want 0 (namespaces dropped)", n, err)
	}
}
