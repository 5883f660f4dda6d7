package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// FloorOptions configure RunFloor: the bare decision of scripts/redis-floor/decision.lua, driven open loop.
type FloorOptions struct {
	// Rates are the decisions per second of the runs (one open-loop run per rate and repeat).
	Rates []float64
	// Clients, when set, replaces Rates by the shape of `bench route --clients … --rate half`: per repeat
	// and client count a closed-loop run (that many senders back to back, Duration long) and then an
	// open-loop run at half of its decisions/s — the floor at half of its *own* saturation, which is what
	// SPEC §9's latency targets ask of kvrouter (Rates drives the floor at kvrouter's rates instead).
	Clients []int
	// Duration is each run's schedule (default 4 s).
	Duration time.Duration
	// Senders is the most calls in flight (default 64, as `bench route --rate`).
	Senders int
	// Repeat is the runs per rate (default 3).
	Repeat int
	// SpinTail: as RouteOptions.SpinTail (0 = sleep only), so the floor and kvrouter are driven alike.
	SpinTail time.Duration
	// Settle is the pause before each open-loop run that follows a closed-loop one (Clients), as
	// RouteOptions.Settle (DefaultSettle says why), and with Rates before the first run (whatever ran just
	// before — scripts/redis-floor.sh's redis-benchmark rows and fill — may have saturated the server); 0 = none.
	Settle time.Duration
	// RouteFn and DoneFn are the library's functions (kvrouter_floor_route, kvrouter_floor_done), called
	// with RouteKeys/RouteArgs and DoneKeys/DoneArgs (scripts/redis-floor.sh builds them).
	RouteFn, DoneFn string
	// NoDone drives the route function alone (DoneFn may then be empty): with an empty route function,
	// a client path beside `bench route --no-done`'s without a second call per decision. Default false.
	NoDone               bool
	RouteKeys, RouteArgs []string
	DoneKeys, DoneArgs   []string
	// Prompts, when set, replace RouteArgs[0] call by call, in turn (FillMinFloor makes them and indexes
	// them), so the decisions meet a pool-sized index as kvrouter's benchmark does rather than one hot prompt.
	Prompts []string
	// Log gets a line per run (nil: none).
	Log io.Writer
}

// FloorRun is one open-loop run of the bare decision: route's latency from its scheduled time (µs), its
// send lag and service time, and the Redis CPU per decision (route + done, INFO cpu delta).
type FloorRun struct {
	// Mode is "open" (Rate given) or "closed" (Clients back to back; Rate is then 0).
	Mode string `json:"mode"`
	// Clients is the closed-loop run's client count, and the one an open run at half of it was derived
	// from (0: a rate of Rates).
	Clients int `json:"clients,omitempty"`
	// DecisionsPerS is the decisions made per second of the run (closed loop: the saturation).
	DecisionsPerS float64 `json:"decisions_per_s"`
	Rate          float64 `json:"rate"`
	Run           int     `json:"run"`
	Decisions     int     `json:"decisions"`
	P50us         float64 `json:"p50_us"`
	P99us         float64 `json:"p99_us"`
	MaxUs         float64 `json:"max_us"`
	LagP50us      float64 `json:"send_lag_p50_us"`
	// SpinTailUs is the generator's spin tail (FloorOptions.SpinTail), µs; 0: senders only slept.
	SpinTailUs   float64 `json:"spin_tail_us"`
	ServiceP50us float64 `json:"service_p50_us"`
	ServiceP99us float64 `json:"service_p99_us"`
	// ClientCPUus, ClientSpinUs and ClientBusy: the client's own CPU per decision, its spin tail's part,
	// and how busy it kept the client's CPUs (as RouteRun's), so the floor's generator and kvrouter's compare.
	ClientCPUus  float64 `json:"client_cpu_us_per_decision"`
	ClientSpinUs float64 `json:"client_spin_us_per_decision"`
	ClientBusy   float64 `json:"client_busy"`
	RedisCPUus   float64 `json:"redis_cpu_us_per_decision"`
	// RedisCPUSysUs is the kernel's part of RedisCPUus (used_cpu_sys).
	RedisCPUSysUs float64 `json:"redis_cpu_sys_us_per_decision"`
	LoadBefore    LoadAvg `json:"loadavg_before"`
	LoadAfter     LoadAvg `json:"loadavg_after"`
}

// RunFloor drives the bare decision (route, then done, one FCALL each, none of kvrouter's logic) at each
// of o.Rates with the same open-loop schedule and clock as `bench route --rate` (runLoad,
// openLoopClock): the floor under SPEC §9's end-to-end latency targets at those rates, on this machine and
// this client; or, with o.Clients, closed loop at each count and open loop at half of what that made, as
// `bench route --clients … --rate half` drives kvrouter. The library must be loaded on st's server (scripts/redis-floor.sh does it).
func RunFloor(ctx context.Context, st *statestore.Redis, o FloorOptions) ([]FloorRun, error) {
	if len(o.Rates) == 0 && len(o.Clients) == 0 || o.RouteFn == "" || o.DoneFn == "" && !o.NoDone {
		return nil, fmt.Errorf("bench floor: rates or clients, and the route and done functions, are required")
	}
	if len(o.Rates) > 0 && len(o.Clients) > 0 {
		return nil, fmt.Errorf("bench floor: rates and clients are exclusive (clients runs each count closed loop, then open at half)")
	}
	for _, c := range o.Clients {
		if c <= 0 {
			return nil, fmt.Errorf("bench floor: clients %d: want > 0", c)
		}
	}
	if o.Duration <= 0 {
		o.Duration = 4 * time.Second
	}
	if o.Senders <= 0 {
		o.Senders = 64
	}
	if o.Repeat <= 0 {
		o.Repeat = 3
	}
	var next atomic.Uint64
	call := func(_, _ int) (time.Time, time.Time, error) {
		args := o.RouteArgs
		if len(o.Prompts) > 0 && len(args) > 0 {
			args = slices.Clone(args)
			args[0] = o.Prompts[next.Add(1)%uint64(len(o.Prompts))]
		}
		t0 := time.Now()
		if err := st.CallFunction(ctx, o.RouteFn, o.RouteKeys, args); err != nil {
			return t0, t0, err
		}
		t1 := time.Now()
		if o.NoDone {
			return t0, t1, nil
		}
		return t0, t1, st.CallFunction(ctx, o.DoneFn, o.DoneKeys, o.DoneArgs)
	}
	run := func(r, clients int, rate float64) (FloorRun, error) {
		ph, err := startPhase(ctx, st)
		if err != nil {
			return FloorRun{}, err
		}
		spec := loadSpec{Senders: max(clients, o.Senders), Rate: rate, Duration: o.Duration, SpinTail: o.SpinTail}
		clk, mode := openLoopClock(spec.SpinTail), "open"
		if rate == 0 {
			spec.Senders, spec.SpinTail, clk, mode = clients, 0, wallClock{}, "closed"
		}
		cpu0 := processCPU()
		lat, elapsed, lag, svc, err := runLoad(ctx, clk, spec, call)
		if err != nil {
			return FloorRun{}, err
		}
		clientCPU := processCPU() - cpu0
		d, _, _, err := ph.end(ctx)
		if err != nil {
			return FloorRun{}, err
		}
		slices.Sort(lat)
		slices.Sort(lag)
		slices.Sort(svc)
		out := FloorRun{Mode: mode, Clients: clients, Rate: rate, Run: r, Decisions: len(lat), P50us: quantileUs(lat, 0.5), P99us: quantileUs(lat, 0.99),
			MaxUs: quantileUs(lat, 1), LagP50us: quantileUs(lag, 0.5), SpinTailUs: float64(spec.SpinTail) / 1e3, ServiceP50us: quantileUs(svc, 0.5),
			ServiceP99us: quantileUs(svc, 0.99), LoadBefore: ph.load, LoadAfter: ReadLoadAvg()}
		out.ClientCPUus, out.ClientSpinUs, out.ClientBusy = clientUse(clientCPU, spinTime(clk), elapsed, len(lat))
		if elapsed > 0 {
			out.DecisionsPerS = float64(len(lat)) / elapsed.Seconds()
		}
		if len(lat) > 0 {
			out.RedisCPUus = d.CPUSeconds * 1e6 / float64(len(lat))
			out.RedisCPUSysUs = d.CPUSysSeconds * 1e6 / float64(len(lat))
		}
		if o.Log != nil {
			what := fmt.Sprintf("%6.0f/s", rate)
			if mode == "closed" {
				what = fmt.Sprintf("closed %2d clients %6.0f/s", clients, out.DecisionsPerS)
			} else if clients > 0 {
				what = fmt.Sprintf("open (half of %2d clients) %6.0f/s", clients, rate)
			}
			fmt.Fprintf(o.Log, "floor %s run %d: p50 %5.0f µs  p99 %6.0f µs  max %6.0f µs  lag p50 %4.0f  service p50 %5.0f p99 %6.0f  Redis CPU %6.1f µs/decision (sys %5.1f)  client CPU %6.1f µs/decision (spin %4.1f, %3.0f %% busy)  load %.2f\n",
				what, r, out.P50us, out.P99us, out.MaxUs, out.LagP50us, out.ServiceP50us, out.ServiceP99us, out.RedisCPUus, out.RedisCPUSysUs,
				out.ClientCPUus, out.ClientSpinUs, 100*out.ClientBusy, out.LoadAfter[0])
		}
		return out, nil
	}
	var out []FloorRun
	if len(o.Clients) > 0 {
		for r := 1; r <= o.Repeat; r++ {
			for _, c := range o.Clients {
				closed, err := run(r, c, 0)
				if err != nil {
					return nil, err
				}
				out = append(out, closed)
				if closed.DecisionsPerS <= 0 {
					return nil, fmt.Errorf("bench floor: the closed-loop run at %d clients made no decision", c)
				}
				settle(ctx, o.Settle)
				open, err := run(r, c, closed.DecisionsPerS/2)
				if err != nil {
					return nil, err
				}
				out = append(out, open)
			}
		}
		return out, nil
	}
	for _, rate := range o.Rates {
		if rate <= 0 {
			return nil, fmt.Errorf("bench floor: rate %v: want > 0", rate)
		}
	}
	settle(ctx, o.Settle)
	for _, rate := range o.Rates {
		for r := 1; r <= o.Repeat; r++ {
			fr, err := run(r, 0, rate)
			if err != nil {
				return nil, err
			}
			out = append(out, fr)
		}
	}
	return out, nil
}

// MinFloorPromptBytes is a prompt of the minimal decision's pool: 64 blocks of 8 bytes.
const MinFloorPromptBytes = 512

// MinFloorPrompts makes the n prompts of seed (random bytes) that FillMinFloor indexes: a run that finds
// them indexed already (an earlier run's fill of the same seed, kept in an RDB) routes them without refilling.
func MinFloorPrompts(n int, seed uint64) ([]string, error) {
	if n <= 0 {
		return nil, fmt.Errorf("bench floor: %d prompts: want > 0", n)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6b76726f75746572))
	prompts := make([]string, n)
	buf := make([]byte, MinFloorPromptBytes)
	for i := range prompts {
		for j := 0; j < len(buf); j += 8 {
			binary.LittleEndian.PutUint64(buf[j:], rng.Uint64())
		}
		prompts[i] = string(buf)
	}
	return prompts, nil
}

// FillMinFloor makes n prompts (MinFloorPrompts) and indexes them in the minimal decision's pool
// (scripts/redis-floor/decision.lua kvrouter_floor_min_fill, 64 prompts per call: each prompt's first 40
// blocks held by 4 of the 64 candidates), whose index bucket prefix is bucketPrefix. 6,250 prompts make
// the route benchmark's 1 M (block, holder) entries. The library must be loaded and the pool set up
// (kvrouter_floor_min_setup without a prompt). Returns the prompts, for FloorOptions.Prompts.
func FillMinFloor(ctx context.Context, st *statestore.Redis, bucketPrefix string, n int, seed uint64) ([]string, error) {
	prompts, err := MinFloorPrompts(n, seed)
	if err != nil {
		return nil, err
	}
	const perCall = 64
	for k := 0; k < n; k += perCall {
		end := min(k+perCall, n)
		var blob []byte
		for _, p := range prompts[k:end] {
			blob = append(blob, p...)
		}
		if err := st.CallFunction(ctx, "kvrouter_floor_min_fill", []string{bucketPrefix}, []string{string(blob), fmt.Sprint(k)}); err != nil {
			return nil, fmt.Errorf("bench floor: fill prompts %d-%d: %w", k, end-1, err)
		}
	}
	return prompts, nil
}
