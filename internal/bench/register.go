package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// RegisterOptions configure RunRegister.
type RegisterOptions struct {
	// Workers registered one by one (PutWorker) into an empty pool; Slice registrations per measured
	// slice (default 512), so time per registration of the first and last slices shows whether the
	// total is linear or quadratic.
	Workers, Slice int
	// Repeat is the number of runs, each into a fresh namespace. Default 3.
	Repeat int
	// Log receives a text table (nil = none).
	Log io.Writer
}

// RegisterSlice is one slice of registrations: workers [From, To).
type RegisterSlice struct {
	From int `json:"from"`
	To   int `json:"to"`
	// WallUs is client time per registration; RedisCPUus Redis CPU (INFO delta) per registration.
	WallUs     float64 `json:"wall_us_per_registration"`
	RedisCPUus float64 `json:"redis_cpu_us_per_registration,omitempty"`
}

// RegisterRun is one run.
type RegisterRun struct {
	Repeat     int             `json:"repeat"`
	Seconds    float64         `json:"seconds"`
	Slices     []RegisterSlice `json:"slices"`
	LoadBefore LoadAvg         `json:"loadavg_before"`
	LoadAfter  LoadAvg         `json:"loadavg_after"`
}

// RegisterSliceSummary is median/min/max of one slice over the runs.
type RegisterSliceSummary struct {
	From       int     `json:"from"`
	To         int     `json:"to"`
	WallUs     Summary `json:"wall_us_per_registration"`
	RedisCPUus Summary `json:"redis_cpu_us_per_registration"`
}

// RegisterReport is what `kvrouter bench register` prints. LastOverFirst is the median time (and
// Redis CPU) per registration of the last slice over the first: ≈ 1 when registering is O(1) each,
// ≈ the slice count when each registration is O(workers) (the whole run quadratic).
type RegisterReport struct {
	Bench                 string                 `json:"bench"`
	Store                 string                 `json:"store"`
	Workers               int                    `json:"workers"`
	Slice                 int                    `json:"slice"`
	Repeat                int                    `json:"repeat"`
	Runs                  []RegisterRun          `json:"runs"`
	Slices                []RegisterSliceSummary `json:"slices"`
	WallLastOverFirst     float64                `json:"wall_last_over_first"`
	RedisCPULastOverFirst float64                `json:"redis_cpu_last_over_first,omitempty"`
	Load                  Summary                `json:"loadavg_1m"`
}

// RunRegister registers Workers workers one by one, Repeat times (each into a store open returns;
// its namespace is dropped after), and measures each slice.
func RunRegister(ctx context.Context, open func() (statestore.Store, error), o RegisterOptions) (RegisterReport, error) {
	if o.Slice == 0 {
		o.Slice = 512
	}
	if o.Repeat == 0 {
		o.Repeat = 3
	}
	rep := RegisterReport{Bench: "register", Workers: o.Workers, Slice: o.Slice, Repeat: o.Repeat}
	if o.Workers <= 0 || o.Slice <= 0 || o.Repeat < 0 {
		return rep, errors.New("workers, slice and repeat must be > 0")
	}
	var err error
	rep.Runs, rep.Store, err = freshRuns(ctx, open, o.Repeat, func(st statestore.Store, repeat int) (RegisterRun, error) {
		run, err := registerRun(ctx, st, o)
		run.Repeat = repeat
		return run, err
	})
	if err != nil {
		return rep, err
	}
	var loads []float64
	for i := range rep.Runs[0].Slices {
		var wall, cpu []float64
		for _, run := range rep.Runs {
			wall, cpu = append(wall, run.Slices[i].WallUs), append(cpu, run.Slices[i].RedisCPUus)
		}
		s0 := rep.Runs[0].Slices[i]
		rep.Slices = append(rep.Slices, RegisterSliceSummary{From: s0.From, To: s0.To, WallUs: Summarize(wall), RedisCPUus: Summarize(cpu)})
	}
	for _, run := range rep.Runs {
		loads = append(loads, run.LoadBefore[0], run.LoadAfter[0])
	}
	rep.Load = Summarize(loads)
	first, last := rep.Slices[0], rep.Slices[len(rep.Slices)-1]
	if first.WallUs.Median > 0 {
		rep.WallLastOverFirst = last.WallUs.Median / first.WallUs.Median
	}
	if first.RedisCPUus.Median > 0 {
		rep.RedisCPULastOverFirst = last.RedisCPUus.Median / first.RedisCPUus.Median
	}
	if o.Log != nil {
		fmt.Fprintf(o.Log, "bench register %s: %d workers one by one; median [min–max] of %d runs; last/first slice: wall %.2f×, Redis CPU %.2f×\n",
			rep.Store, o.Workers, o.Repeat, rep.WallLastOverFirst, rep.RedisCPULastOverFirst)
		var rows [][]string
		for _, s := range rep.Slices {
			rows = append(rows, []string{fmt.Sprintf("%d–%d", s.From, s.To), fmtSummary(s.WallUs, 1), fmtSummary(s.RedisCPUus, 1)})
		}
		rows = append(rows, []string{"load 1m", fmtSummary(rep.Load, 2), ""})
		writeTable(o.Log, []string{"workers", "wall µs/registration", "Redis CPU µs/registration"}, rows)
	}
	return rep, nil
}

// registerRun creates an empty pool and registers the workers, measuring each slice.
func registerRun(ctx context.Context, st statestore.Store, o RegisterOptions) (RegisterRun, error) {
	run := RegisterRun{LoadBefore: ReadLoadAvg()}
	const pool = "bench-register"
	if err := st.PutPool(ctx, pool, statestore.DefaultPoolConfig(16)); err != nil {
		return run, err
	}
	start := time.Now()
	for from := 0; from < o.Workers; from += o.Slice {
		to := min(from+o.Slice, o.Workers)
		ph, err := startPhase(ctx, st)
		if err != nil {
			return run, err
		}
		t0 := time.Now()
		for i := from; i < to; i++ {
			id := fmt.Sprintf("w%05d", i)
			if err := st.PutWorker(ctx, pool, statestore.WorkerSpec{WorkerID: id, URL: "http://" + id}, time.Now().UnixMilli()); err != nil {
				return run, fmt.Errorf("worker %d: %w", i, err)
			}
		}
		wall := time.Since(t0)
		d, _, server, err := ph.end(ctx)
		if err != nil {
			return run, err
		}
		s := RegisterSlice{From: from, To: to, WallUs: us(wall) / float64(to-from)}
		if server {
			s.RedisCPUus = d.CPUSeconds * 1e6 / float64(to-from)
		}
		run.Slices = append(run.Slices, s)
	}
	run.Seconds = time.Since(start).Seconds()
	run.LoadAfter = ReadLoadAvg()
	return run, nil
}
