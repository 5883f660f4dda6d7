package statestore

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/kvrouter/kvrouter/luascripts"
)

// gcStepmuls reads lib.lua's GC_STEPMUL_CALL and GC_STEPMUL_IDLE: the Lua collector's step multiplier while
// one of the library's calls runs and the one it leaves behind (lib.lua "GC pacing"; REDIS.md "The Lua
// collector's pace").
func gcStepmuls(t *testing.T) (call, idle int64) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*local GC_STEPMUL_CALL, GC_STEPMUL_IDLE = (\d+), (\d+)$`).FindStringSubmatch(luascripts.Prelude())
	if m == nil {
		t.Fatal("lib.lua declares no GC_STEPMUL_CALL, GC_STEPMUL_IDLE")
	}
	call, _ = strconv.ParseInt(m[1], 10, 64)
	idle, _ = strconv.ParseInt(m[2], 10, 64)
	return call, idle
}

// TestRedisGCPacing: every registered function of the library leaves the Functions VM's step multiplier at
// GC_STEPMUL_IDLE when it returns, whatever it was before the call, so Redis's forced collector step after
// every 50th script call does 50 single steps, not ~100 k work units. A probe library on the same node
// reads the multiplier (collectgarbage returns the previous value) and puts it back.
func TestRedisGCPacing(t *testing.T) {
	gcStepmulCall, gcStepmulIdle := gcStepmuls(t)
	if gcStepmulCall == 77 || gcStepmulIdle == 77 {
		t.Fatal("the probe's marker value 77 is one of lib.lua's multipliers: pick another")
	}
	rs, c := newInternalRedis(t, "gcp:")
	ctx := context.Background()
	probe := "#!lua name=kvrtest_gcprobe\n" +
		"redis.register_function('kvrtest_gcprobe', function(keys, args)\n" +
		"  local prev = collectgarbage('setstepmul', tonumber(args[1]))\n" +
		"  if args[2] == 'restore' then collectgarbage('setstepmul', prev) end\n" +
		"  return prev\n" +
		"end)\n"
	if err := c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(probe).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	stepmul := func(set int64, restore bool) int64 {
		t.Helper()
		mode := "keep"
		if restore {
			mode = "restore"
		}
		v, err := c.Do(ctx, c.B().Fcall().Function("kvrtest_gcprobe").Numkeys(0).Arg(istr(set), mode).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	calls := []struct {
		name string
		run  func() error
	}{
		{"put_pool", func() error { return rs.PutPool(ctx, "p", DefaultPoolConfig(4)) }},
		{"put_worker", func() error { return rs.PutWorker(ctx, "p", WorkerSpec{WorkerID: "w0", URL: "http://x"}, 1000) }},
		{"route", func() error {
			_, err := rs.Route(ctx, RouteRequest{Pool: "p", RequestID: "r1", ISL: 4, NowMs: 1000})
			return err
		}},
		{"lease (done)", func() error { _, err := rs.Done(ctx, "p", "r1", 1001); return err }},
	}
	for _, call := range calls {
		stepmul(77, false) // whatever another library left
		if err := call.run(); err != nil {
			t.Fatalf("%s: %v", call.name, err)
		}
		if got := stepmul(77, true); got != gcStepmulIdle {
			t.Fatalf("after %s the collector's step multiplier is %d, want GC_STEPMUL_IDLE = %d", call.name, got, gcStepmulIdle)
		}
	}
}
