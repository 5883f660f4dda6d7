package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// engineFlagHelp documents the value of --engine (serve and ingest).
const engineFlagHelp = "Repeatable; KVROUTER_ENGINE takes a space-separated list. " +
	"Value `WORKER=tcp://host:port[,replay=tcp://host:port][,dp=N][,url=http://host:port][,topic=T]`: " +
	"WORKER is the worker id; replay= the engine's ZMQ replay (ROUTER) socket, used to fill gaps; dp= the data-parallel rank " +
	"of batches that carry none (default 0); url= the worker's HTTP URL returned by /v1/route; topic= the ZMQ " +
	"subscription prefix (default empty = every topic, as vLLM publishes)"

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runIngest(ctx context.Context, args []string) error {
	fs := newFlagSet("ingest", "ingest --store memory|redis://... --engine w1=tcp://host:5557[,replay=tcp://host:5558][,dp=0][,url=http://host:8000] ...")
	storeURL := storeFlag(fs)
	var engines multiFlag
	fs.Var(&engines, "engine", "an engine to subscribe to. "+engineFlagHelp)
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
	specs, err := ingest.ParseEngines(engines, *pool, *blockSize, *queue, logger)
	if err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}

	st, err := openStore(*storeURL, storeOptions{})
	if err != nil {
		return err
	}
	defer st.Close()
	rt := core.New(st, core.Options{})
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	mgr, err := ingest.Prepare(sctx, st, *pool, *blockSize, specs)
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
		names[i] = s.Config.WorkerID
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
