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

// ParseEngines validates --engine values (WORKER=tcp://…[,replay=…][,dp=N][,url=…][,topic=T]) for a
// pool of blockSize-token blocks; queue is each subscriber's QueueSize (messages). A single value
// holding spaces (KVROUTER_ENGINE) is split into several.
func ParseEngines(values []string, pool string, blockSize, queue int, logger *slog.Logger) ([]Engine, error) {
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
		cfg.Pool, cfg.BlockSize, cfg.QueueSize, cfg.Logger = pool, blockSize, queue, logger
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
	now := time.Now().UnixMilli()
	ws, err := st.Workers(ctx, pool, now)
	if err != nil {
		return nil, fmt.Errorf("pool %q: workers: %w", pool, err)
	}
	have := map[string]int{}
	for _, w := range ws {
		have[w.WorkerID] = max(w.DPSize, 1)
	}
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
	for _, id := range order {
		if n, ok := have[id]; ok && n >= dpSize[id] {
			continue
		}
		spec := statestore.WorkerSpec{WorkerID: id, URL: urls[id], DPSize: dpSize[id]}
		if err := st.PutWorker(ctx, pool, spec, now); err != nil {
			return nil, fmt.Errorf("register worker %q: %w", id, err)
		}
	}
	mgr := NewManager(st)
	for _, e := range engines {
		if err := mgr.Add(e.Config); err != nil {
			return nil, err
		}
	}
	return mgr, nil
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
