package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/server/api"
	"github.com/kvrouter/kvrouter/statestore"
)

func init() {
	register(command{name: "ingest", summary: "KV event ingest: vLLM/SGLang ZMQ subscribers and POST /v1/events into the state store", run: runIngest})
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runIngest(ctx context.Context, args []string) error {
	fs := newFlagSet("ingest", "ingest --store memory|redis://... --engine w1=tcp://host:5557[,replay=tcp://host:5558][,dp=0][,url=http://host:8000] ...")
	storeURL := storeFlag(fs)
	var engines multiFlag
	fs.Var(&engines, "engine", "an engine to subscribe to (repeatable; KVROUTER_ENGINE takes a space-separated list): WORKER=tcp://host:port[,replay=tcp://host:port][,dp=N][,url=http://…][,topic=T]")
	pool := fs.String("pool", core.DefaultPool, "pool of the engines (created with --block-size if missing)")
	blockSize := fs.Int("block-size", 16, "the pool's KV block size, tokens (must equal the engines')")
	addr := fs.String("addr", "127.0.0.1:8081", "HTTP listen address for /v1/events, /metrics, /healthz (port 0 picks a free port)")
	queue := fs.Int("queue-size", 64, "decoded messages buffered per engine before back-pressure")
	shutdownTimeout := fs.Duration("shutdown-timeout", 10*time.Second, "drain time on SIGTERM/SIGINT")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	logger, err := textLogger(*logLevel)
	if err != nil {
		return err
	}
	if err := statestore.CheckID("--pool", *pool); err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}
	if *blockSize < 1 {
		return fmt.Errorf("invalid configuration: --block-size %d: must be > 0", *blockSize)
	}
	specs, err := parseEngineSpecs(engines, *pool, *blockSize, *queue, logger)
	if err != nil {
		return err
	}

	st, err := openStore(ctx, *storeURL, storeOptions{})
	if err != nil {
		return err
	}
	defer st.Close()
	rt := core.New(st, core.Options{})
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	mgr, err := startIngest(sctx, rt, st, *pool, *blockSize, specs)
	cancel()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		ingest.NewCollector(mgr))
	metrics := api.NewMetrics(reg)
	a := api.New(rt, api.Options{Metrics: metrics, Logger: logger, Timeout: 10 * time.Second})
	h := ingest.NewServiceHandler(ingest.ServiceOptions{Manager: mgr, API: apiHandler(a), Ready: st.Ping, Gatherer: reg})

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", *addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	mctx, stopMgr := context.WithCancel(context.Background())
	mdone := make(chan struct{})
	go func() {
		defer close(mdone)
		_ = mgr.Run(mctx)
	}()
	sdone := make(chan error, 1)
	go func() { sdone <- srv.Serve(ln) }()
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.cfg.WorkerID
	}
	logger.Info("listening", "addr", ln.Addr().String(), "store", st.Name(), "pool", *pool,
		"block_size", *blockSize, "engines", strings.Join(names, ","))
	select {
	case <-ctx.Done():
	case err := <-sdone:
		stopMgr()
		<-mdone
		return fmt.Errorf("http server: %w", err)
	}
	logger.Info("shutting down")
	c, cancel2 := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel2()
	err = srv.Shutdown(c)
	stopMgr() // subscribers finish the store call in progress and return
	select {
	case <-mdone:
	case <-c.Done():
		return errors.New("subscribers did not stop within --shutdown-timeout")
	}
	logger.Info("stopped")
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// engineSpec is one --engine subscription and the worker URL it registers.
type engineSpec struct {
	cfg ingest.SubscriberConfig
	url string
}

// parseEngineSpecs validates --engine values (WORKER=tcp://…[,replay=…][,dp=N][,url=…]) for a pool.
func parseEngineSpecs(engines []string, pool string, blockSize, queue int, logger *slog.Logger) ([]engineSpec, error) {
	if len(engines) == 1 && strings.Contains(engines[0], " ") { // from KVROUTER_ENGINE
		engines = strings.Fields(engines[0])
	}
	var specs []engineSpec
	for _, e := range engines {
		cfg, url, err := ingest.ParseEngineSpec(e)
		if err != nil {
			return nil, fmt.Errorf("invalid configuration: %v", err)
		}
		if err := statestore.CheckID("--engine worker id", cfg.WorkerID); err != nil {
			return nil, fmt.Errorf("invalid configuration: %v", err)
		}
		cfg.Pool, cfg.BlockSize, cfg.QueueSize, cfg.Logger = pool, blockSize, queue, logger
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("invalid configuration: --engine %q: %v", e, err)
		}
		specs = append(specs, engineSpec{cfg, url})
	}
	return specs, nil
}

// startIngest makes sure the pool and the engines' workers exist, and returns a Manager (not yet
// running) with one subscriber per engine.
func startIngest(ctx context.Context, rt *core.Router, sink ingest.Sink, pool string, blockSize int, specs []engineSpec) (*ingest.Manager, error) {
	err := setupIngest(ctx, rt, pool, blockSize, func(yield func(id, url string, dp int) error) error {
		for _, s := range specs {
			if err := yield(s.cfg.WorkerID, s.url, s.cfg.DPRank); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	mgr := ingest.NewManager(sink)
	for _, s := range specs {
		if err := mgr.Add(s.cfg); err != nil {
			return nil, fmt.Errorf("invalid configuration: %v", err)
		}
	}
	return mgr, nil
}

// setupIngest creates the pool if missing (checking its block size otherwise) and registers every
// engine's worker that is not registered yet (an existing registration is left as it is).
func setupIngest(ctx context.Context, rt *core.Router, pool string, blockSize int,
	each func(yield func(id, url string, dp int) error) error) error {
	cfg, err := rt.Store().GetPool(ctx, pool)
	switch {
	case errors.Is(err, statestore.ErrUnknownPool):
		if err := rt.PutPool(ctx, pool, statestore.DefaultPoolConfig(blockSize)); err != nil {
			return fmt.Errorf("create pool %q: %w", pool, err)
		}
	case err != nil:
		return fmt.Errorf("pool %q: %w", pool, err)
	case cfg.BlockSize != blockSize:
		return fmt.Errorf("invalid configuration: --block-size %d differs from pool %q's block_size %d", blockSize, pool, cfg.BlockSize)
	}
	ws, err := rt.Workers(ctx, pool)
	if err != nil {
		return fmt.Errorf("pool %q: workers: %w", pool, err)
	}
	have := map[string]int{}
	for _, w := range ws {
		have[w.WorkerID] = max(w.DPSize, 1)
	}
	dpSize := map[string]int{}
	urls := map[string]string{}
	var order []string
	err = each(func(id, url string, dp int) error {
		if _, seen := dpSize[id]; !seen {
			order = append(order, id)
		}
		dpSize[id] = max(dpSize[id], dp+1)
		if url != "" {
			urls[id] = url
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range order {
		if n, ok := have[id]; ok && n >= dpSize[id] {
			continue
		}
		spec := statestore.WorkerSpec{WorkerID: id, URL: urls[id], DPSize: dpSize[id]}
		if err := rt.PutWorker(ctx, pool, spec, 0); err != nil {
			return fmt.Errorf("register worker %q: %w", id, err)
		}
	}
	return nil
}

// apiHandler serves an api.API over net/http.
func apiHandler(a *api.API) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.Header().Set("Content-Type", api.ContentType)
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			io.WriteString(w, `{"error":{"code":"too_large","message":"request body too large or unreadable"}}`+"\n")
			return
		}
		q := r.URL.Query()
		resp := a.Do(r.Context(), api.Request{Method: r.Method, RawPath: r.URL.EscapedPath(), Query: q.Get,
			Header: r.Header.Get, Body: body})
		w.Header().Set("Content-Type", api.ContentType)
		w.WriteHeader(resp.Status)
		w.Write(resp.Body)
	})
}
