package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/kvrouter/kvrouter/server"
	"github.com/kvrouter/kvrouter/simulation/mock"
)

// GatewayFleet is an in-process fleet for the gateway benchmark: mock engines and a gateway
// (server.Run) on loopback ports, the engines registered as the workers of a pool of their own.
type GatewayFleet struct {
	Gateway string   // the gateway's base URL
	Engines []string // the engines' base URLs
	Pool    string
	Model   string
	stop    func()
}

// StartGatewayFleet starts n mock engines (virtual time speedup×, streamed tokens at least itl apart in
// wall-clock time) and a gateway over store, with a fresh pool and model name so a shared Redis is never
// disturbed (the pool is left behind, with its workers).
func StartGatewayFleet(ctx context.Context, store string, n int, speedup float64, itl time.Duration) (*GatewayFleet, error) {
	if n < 1 {
		return nil, errors.New("at least one engine")
	}
	tag := fmt.Sprintf("gwbench-%d", time.Now().UnixNano())
	f := &GatewayFleet{Pool: tag, Model: tag}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fctx, cancel := context.WithCancel(ctx)
	var servers []*mock.Server
	runDone := make(chan error, 1)
	f.stop = func() {
		cancel()
		for _, s := range servers {
			s.Close()
		}
		<-runDone
	}
	for i := 0; i < n; i++ {
		s, err := mock.Start(fctx, mock.Config{Name: fmt.Sprintf("e%d", i+1), Model: f.Model, Speedup: speedup,
			ITLMs: float64(itl) / float64(time.Millisecond) * speedup, ReplayEndpoint: "none", Seed: uint64(i + 1), Logger: quiet})
		if err != nil {
			cancel()
			for _, s := range servers {
				s.Close()
			}
			return nil, err
		}
		servers = append(servers, s)
		f.Engines = append(f.Engines, s.URL())
	}
	cfg := server.DefaultConfig()
	cfg.Addr, cfg.Store, cfg.LogLevel, cfg.LogOutput = "127.0.0.1:0", store, "error", io.Discard
	cfg.Pools = map[string]map[string]any{f.Pool: {"block_size": 16, "models": []string{f.Model}}}
	addrc := make(chan net.Addr, 1)
	cfg.OnListening = func(a net.Addr) { addrc <- a }
	go func() { runDone <- server.Run(fctx, cfg) }()
	select {
	case a := <-addrc:
		f.Gateway = "http://" + a.String()
	case err := <-runDone:
		runDone <- err
		f.stop()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	h := newHTTPCaller(f.Gateway)
	for i, u := range f.Engines {
		if err := h.must("PUT", fmt.Sprintf("/v1/workers/e%d?pool=%s", i+1, f.Pool), fmt.Appendf(nil, `{"url":%q}`, u)); err != nil {
			f.stop()
			return nil, err
		}
	}
	return f, nil
}

// Stop stops the gateway and the engines.
func (f *GatewayFleet) Stop() { f.stop() }
