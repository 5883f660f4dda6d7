package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// FloorOptions configure RunFloor: the bare decision of scripts/redis-floor/decision.lua, driven open loop.
type FloorOptions struct {
	// Rates are the decisions per second of the runs (one open-loop run per rate and repeat).
	Rates []float64
	// Duration is each run's schedule (default 4 s).
	Duration time.Duration
	// Senders is the most calls in flight (default 64, as `bench route --rate`).
	Senders int
	// Repeat is the runs per rate (default 3).
	Repeat int
	// SpinTail: as RouteOptions.SpinTail (0 = sleep only), so the floor and kvrouter are driven alike.
	SpinTail time.Duration
	// RouteFn and DoneFn are the library's functions (kvrouter_floor_route, kvrouter_floor_done), called
	// with RouteKeys/RouteArgs and DoneKeys/DoneArgs (scripts/redis-floor.sh builds them).
	RouteFn, DoneFn      string
	RouteKeys, RouteArgs []string
	DoneKeys, DoneArgs   []string
	// Log gets a line per run (nil: none).
	Log io.Writer
}

// FloorRun is one open-loop run of the bare decision: route's latency from its scheduled time (µs), its
// send lag and service time, and the Redis CPU per decision (route + done, INFO cpu delta).
type FloorRun struct {
	Rate      float64 `json:"rate"`
	Run       int     `json:"run"`
	Decisions int     `json:"decisions"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	MaxUs     float64 `json:"max_us"`
	LagP50us  float64 `json:"send_lag_p50_us"`
	// SpinTailUs is the generator's spin tail (FloorOptions.SpinTail), µs; 0: senders only slept.
	SpinTailUs   float64 `json:"spin_tail_us"`
	ServiceP50us float64 `json:"service_p50_us"`
	ServiceP99us float64 `json:"service_p99_us"`
	RedisCPUus   float64 `json:"redis_cpu_us_per_decision"`
	// RedisCPUSysUs is the kernel's part of RedisCPUus (used_cpu_sys).
	RedisCPUSysUs float64 `json:"redis_cpu_sys_us_per_decision"`
	LoadBefore    LoadAvg `json:"loadavg_before"`
	LoadAfter     LoadAvg `json:"loadavg_after"`
}

// RunFloor drives the bare decision (route, then done, one FCALL each, none of kvrouter's logic) at each
// of o.Rates with the same open-loop schedule and clock as `bench route --rate` (runLoad,
// newSleepClock): the floor under SPEC §9's end-to-end latency targets at those rates, on this machine and
// this client. The library must be loaded on st's server (scripts/redis-floor.sh does it).
func RunFloor(ctx context.Context, st *statestore.Redis, o FloorOptions) ([]FloorRun, error) {
	if len(o.Rates) == 0 || o.RouteFn == "" || o.DoneFn == "" {
		return nil, fmt.Errorf("bench floor: rates and the route and done functions are required")
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
	call := func(_, _ int) (time.Time, time.Time, error) {
		t0 := time.Now()
		if err := st.CallFunction(ctx, o.RouteFn, o.RouteKeys, o.RouteArgs); err != nil {
			return t0, t0, err
		}
		t1 := time.Now()
		return t0, t1, st.CallFunction(ctx, o.DoneFn, o.DoneKeys, o.DoneArgs)
	}
	var out []FloorRun
	for _, rate := range o.Rates {
		if rate <= 0 {
			return nil, fmt.Errorf("bench floor: rate %v: want > 0", rate)
		}
		for r := 1; r <= o.Repeat; r++ {
			ph, err := startPhase(ctx, st)
			if err != nil {
				return nil, err
			}
			spec := loadSpec{Senders: o.Senders, Rate: rate, Duration: o.Duration, SpinTail: o.SpinTail}
			lat, _, lag, svc, err := runLoad(ctx, openLoopClock(spec.SpinTail), spec, call)
			if err != nil {
				return nil, err
			}
			d, _, _, err := ph.end(ctx)
			if err != nil {
				return nil, err
			}
			slices.Sort(lat)
			slices.Sort(lag)
			slices.Sort(svc)
			run := FloorRun{Rate: rate, Run: r, Decisions: len(lat), P50us: quantileUs(lat, 0.5), P99us: quantileUs(lat, 0.99),
				MaxUs: quantileUs(lat, 1), LagP50us: quantileUs(lag, 0.5), SpinTailUs: float64(o.SpinTail) / 1e3, ServiceP50us: quantileUs(svc, 0.5),
				ServiceP99us: quantileUs(svc, 0.99), LoadBefore: ph.load, LoadAfter: ReadLoadAvg()}
			if len(lat) > 0 {
				run.RedisCPUus = d.CPUSeconds * 1e6 / float64(len(lat))
				run.RedisCPUSysUs = d.CPUSysSeconds * 1e6 / float64(len(lat))
			}
			if o.Log != nil {
				fmt.Fprintf(o.Log, "floor %6.0f/s run %d: p50 %5.0f µs  p99 %6.0f µs  max %6.0f µs  lag p50 %4.0f  service p50 %5.0f p99 %6.0f  Redis CPU %6.1f µs/decision (sys %5.1f)  load %.2f\n",
					rate, r, run.P50us, run.P99us, run.MaxUs, run.LagP50us, run.ServiceP50us, run.ServiceP99us, run.RedisCPUus, run.RedisCPUSysUs, run.LoadAfter[0])
			}
			out = append(out, run)
		}
	}
	return out, nil
}
