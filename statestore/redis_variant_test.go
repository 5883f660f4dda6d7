package statestore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/blockhash"
)

// TestRedisVariantHarness is a manual profiling harness (skipped unless KVR_VAR_ADDR is set): it times
// variants of the route script (e.g. copies cut short after one phase) with sequential EVALSHA 'route' calls
// against the index TestRedisPerfHarness loaded (same chains and prefix; KVR_VAR_PREFIX overrides it) and
// prints commandstats µs per call for each variant, KVR_VAR_ROUNDS rounds alternated (3) of KVR_VAR_ROUTES
// routes (2000). KVR_VAR_SCRIPTS: comma-separated libfile:routefile pairs (the script is lib + route, as
// luascripts.Source builds it). Variants that book leave leases and loads behind.
func TestRedisVariantHarness(t *testing.T) {
	addr := os.Getenv("KVR_VAR_ADDR")
	if addr == "" {
		t.Skip("KVR_VAR_ADDR not set")
	}
	workers, _ := strconv.Atoi(os.Getenv("KVR_VAR_WORKERS"))
	if workers == 0 {
		workers = 64
	}
	routes, _ := strconv.Atoi(os.Getenv("KVR_VAR_ROUTES"))
	if routes == 0 {
		routes = 2000
	}
	rounds, _ := strconv.Atoi(os.Getenv("KVR_VAR_ROUNDS"))
	if rounds == 0 {
		rounds = 3
	}
	blocks := 1000000
	prefix := fmt.Sprintf("perf%d-%d:", workers, blocks)
	if p := os.Getenv("KVR_VAR_PREFIX"); p != "" {
		prefix = p
	}
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var names []string
	var scripts []*rueidis.Lua
	for _, p := range strings.Split(os.Getenv("KVR_VAR_SCRIPTS"), ",") {
		lf, bf, _ := strings.Cut(p, ":")
		lib, err := os.ReadFile(lf)
		if err != nil {
			t.Fatal(err)
		}
		body, err := os.ReadFile(bf)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
		scripts = append(scripts, rueidis.NewLuaScript(string(lib)+"\n"+string(body)))
	}
	r := rand.New(rand.NewPCG(7, 7))
	var chains [][]uint64
	for i := 0; i < blocks/64; i++ {
		ch := make([]uint64, 64)
		for j := range ch {
			ch[j] = r.Uint64()
		}
		chains = append(chains, ch)
	}
	keys := PoolKeys(prefix, "bench")
	stat := func() float64 {
		s, _ := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
		for _, line := range strings.Split(s, "\n") {
			if strings.HasPrefix(line, "cmdstat_evalsha:") {
				i := strings.Index(line, "usec_per_call=")
				v, _ := strconv.ParseFloat(strings.SplitN(line[i+14:], ",", 2)[0], 64)
				return v
			}
		}
		return 0
	}
	res := make([][]float64, len(scripts))
	for round := 0; round < rounds; round++ {
		for si, sc := range scripts {
			rr := rand.New(rand.NewPCG(uint64(round), 9))
			// warm (EVAL on NOSCRIPT)
			sc.Exec(ctx, c, keys, routeArgs("query", &RouteRequest{SeqHashes: []uint64{1}, NowMs: time.Now().UnixMilli()}))
			c.Do(ctx, c.B().ConfigResetstat().Build())
			for i := 0; i < routes; i++ {
				ch := chains[rr.IntN(len(chains))]
				local := ch
				if rr.IntN(2) == 0 {
					local = append([]uint64(nil), ch...)
					local[rr.IntN(len(local))] ^= 1
				}
				seq := blockhash.Sequence(nil, local)
				req := RouteRequest{Pool: "bench", RequestID: fmt.Sprintf("v%d-%d", time.Now().UnixNano(), i), SeqHashes: seq,
					ISL: int64(len(seq) * 16), Random: rr.Float64(), NowMs: time.Now().UnixMilli()}
				arr, err := sc.Exec(ctx, c, keys, routeArgs("route", &req)).ToArray()
				if err != nil {
					t.Fatalf("%s: %v", names[si], err)
				}
				if i == 0 && round == 0 {
					t.Logf("%s first reply %s", names[si], msgStr(arr[0]))
				}
			}
			res[si] = append(res[si], stat())
		}
	}
	for si := range scripts {
		t.Logf("%-60s µs/call %v", names[si], res[si])
	}
}
