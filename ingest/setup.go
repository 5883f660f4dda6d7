package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// Engine is one --engine subscription and the URL its worker is registered with.
type Engine struct {
	Config SubscriberConfig
	URL    string
}

// EngineOptions are the subscriber settings every --engine shares.
type EngineOptions struct {
	// Pool and BlockSize (tokens) are the engines' pool; both required.
	Pool      string
	BlockSize int
	// QueueSize, MaxMessageBytes and RestartProbeInterval are SubscriberConfig's; zero takes its
	// defaults.
	QueueSize            int
	MaxMessageBytes      int
	RestartProbeInterval time.Duration
	Logger               *slog.Logger
}

// ParseEngines validates --engine values (WORKER=tcp://…[,replay=…][,dp=N][,url=…][,topic=T]) with
// the shared settings o. A single value holding spaces (KVROUTER_ENGINE) is split into several.
func ParseEngines(values []string, o EngineOptions) ([]Engine, error) {
	if len(values) == 1 && strings.Contains(values[0], " ") {
		values = strings.Fields(values[0])
	}
	var out []Engine
	for _, v := range values {
		cfg, url, err := ParseEngineSpec(v)
		if err != nil {
			return nil, err
		}
		if err := statestore.CheckID("--engine worker id", cfg.WorkerID); err != nil {
			return nil, err
		}
		cfg.Pool, cfg.BlockSize, cfg.QueueSize, cfg.Logger = o.Pool, o.BlockSize, o.QueueSize, o.Logger
		cfg.MaxMessageBytes, cfg.RestartProbeInterval = o.MaxMessageBytes, o.RestartProbeInterval
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("--engine %q: %v", v, err)
		}
		out = append(out, Engine{cfg, url})
	}
	return out, nil
}

// Prepare creates the pool if missing (checking its block size otherwise), registers every engine's
// worker that is not registered yet with enough dp ranks (an existing registration is left as it is),
// and returns a Manager, not yet running, with one subscriber per engine feeding st.
func Prepare(ctx context.Context, st statestore.Store, pool string, blockSize int, engines []Engine) (*Manager, error) {
	if err := EnsurePool(ctx, st, pool, blockSize); err != nil {
		return nil, err
	}
	if _, err := RegisterMissing(ctx, st, pool, Registrations(engines), time.Now().UnixMilli()); err != nil {
		return nil, err
	}
	return Subscribe(st, engines)
}

// Subscribe returns a Manager, not yet running, with one subscriber per engine feeding st; it makes no
// store call (Prepare's second half). A subscriber retries a failed ApplyEvents with backoff, so a
// Manager may run before st answers (an ingest started while Redis is unreachable) and before the pool
// and workers exist: its batches land once they do.
func Subscribe(st statestore.Store, engines []Engine) (*Manager, error) {
	mgr := NewManager(st)
	for _, e := range engines {
		if err := mgr.Add(e.Config); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// RegisterMissing registers each of specs that the pool lacks, or holds with fewer dp ranks than the
// spec; a registration already there is left as it is. It returns the ids it registered.
func RegisterMissing(ctx context.Context, st statestore.Store, pool string, specs []statestore.WorkerSpec, nowMs int64) ([]string, error) {
	ws, err := st.Workers(ctx, pool, nowMs)
	if err != nil {
		return nil, fmt.Errorf("pool %q: workers: %w", pool, err)
	}
	have := make(map[string]int, len(ws))
	for _, w := range ws {
		have[w.WorkerID] = max(w.DPSize, 1)
	}
	var done []string
	for _, spec := range specs {
		if n, ok := have[spec.WorkerID]; ok && n >= max(spec.DPSize, 1) {
			continue
		}
		if err := st.PutWorker(ctx, pool, spec, nowMs); err != nil {
			return done, fmt.Errorf("register worker %q: %w", spec.WorkerID, err)
		}
		done = append(done, spec.WorkerID)
	}
	return done, nil
}

// Registrations returns the worker registrations the engines need, in first-seen order: one per worker
// id, with enough dp ranks for every engine of that worker and the last URL given for it.
func Registrations(engines []Engine) []statestore.WorkerSpec {
	dpSize, urls := map[string]int{}, map[string]string{}
	var order []string
	for _, e := range engines {
		id := e.Config.WorkerID
		if _, seen := dpSize[id]; !seen {
			order = append(order, id)
		}
		dpSize[id] = max(dpSize[id], e.Config.DPRank+1)
		if e.URL != "" {
			urls[id] = e.URL
		}
	}
	out := make([]statestore.WorkerSpec, len(order))
	for i, id := range order {
		out[i] = statestore.WorkerSpec{WorkerID: id, URL: urls[id], DPSize: dpSize[id]}
	}
	return out
}

// EnsurePool creates pool with the default knobs and blockSize-token blocks if it is missing; an
// existing pool must have that block size (ErrInvalid otherwise).
func EnsurePool(ctx context.Context, st statestore.Store, pool string, blockSize int) error {
	cfg, err := st.GetPool(ctx, pool)
	switch {
	case errors.Is(err, statestore.ErrUnknownPool):
		if err := st.PutPool(ctx, pool, statestore.DefaultPoolConfig(blockSize)); err != nil {
			return fmt.Errorf("create pool %q: %w", pool, err)
		}
	case err != nil:
		return fmt.Errorf("pool %q: %w", pool, err)
	case cfg.BlockSize != blockSize:
		return fmt.Errorf("%w: block size %d differs from pool %q's block_size %d", statestore.ErrInvalid, blockSize, pool, cfg.BlockSize)
	}
	return nil
}
