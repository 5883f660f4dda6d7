package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/kvrouter/kvrouter/server"
	"github.com/kvrouter/kvrouter/simulation/mock"
)

func init() {
	benchCommands["gateway"] = command{name: "gateway", summary: "the OpenAI-compatible gateway's added latency over calling the engines directly, at a fixed rate (SPEC §9)", run: runBenchGateway}
}

func runBenchGateway(ctx context.Context, args []string) error {
	fs := newFlagSet("bench gateway", "bench gateway [--url http://gateway [--pool P --model M] | --store memory|redis://… --engines N] [--rate R] [--duration D]\n\n"+
		"Sends the same token-array completions at a fixed rate, alternately to the engines directly and through the gateway,\n"+
		"non-streaming and streaming, and reports the gateway's added latency (p50/p99, per chunk) and its saturation.\n"+
		"Without --url it starts mock engines and a gateway in-process (the gateway on --store).")
	gwURL := fs.String("url", "", "an already running gateway; its pool's workers (GET /v1/workers?pool=) are the direct baseline")
	pool := fs.String("pool", "default", "with --url: the pool whose workers are called directly")
	model := fs.String("model", "mock-model", "with --url: the model name to request")
	storeURL := storeFlag(fs)
	engines := fs.Int("engines", 4, "in-process mock engines")
	speedup := fs.Float64("speedup", 1000, "the mock engines' virtual time speedup (high: the engines add little time of their own)")
	itl := fs.Duration("itl", time.Millisecond, "in-process engines: least wall-clock interval between two streamed chunks (the per-chunk comparison needs paced chunks)")
	prompt := fs.Int("prompt", 256, "prompt length, tokens")
	prompts := fs.Int("prompts", 64, "distinct prompts (requests cycle through them)")
	maxTokens := fs.Int("max-tokens", 8, "output tokens of a non-streaming request")
	streamTokens := fs.Int("stream-tokens", 32, "output tokens (chunks) of a streaming request")
	rate := fs.Float64("rate", 0, "fixed request rate, requests/s, direct and gateway requests alternating; 0 = half of the gateway's closed-loop saturation in each mode")
	duration := fs.Duration("duration", 5*time.Second, "length of each fixed-rate run (2 runs: non-streaming and streaming)")
	satDuration := fs.Duration("saturation-duration", 3*time.Second, "length of each saturation run")
	satClients := fs.Int("saturation-clients", 32, "closed-loop clients of the saturation runs")
	releaseDelay := fs.Duration("release-delay", server.DefaultConfig().ReleaseDelay, "in-process gateway: its --release-delay (dones carried by its next route of the pool; 0 = each done at once)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o := bench.GatewayOptions{Gateway: *gwURL, Store: *storeURL, Model: *model, PromptTokens: *prompt, Prompts: *prompts,
		MaxTokens: *maxTokens, StreamTokens: *streamTokens, Rate: *rate, Duration: *duration,
		SaturationDuration: *satDuration, SaturationClients: *satClients}
	if o.Gateway == "" {
		f, err := startGatewayFleet(ctx, *storeURL, *engines, *speedup, *itl, *releaseDelay)
		if err != nil {
			return err
		}
		defer f.stop()
		o.Gateway, o.Engines, o.Model = f.gateway, f.engines, f.model
	} else {
		o.Store = "(external)"
		urls, err := poolWorkerURLs(ctx, o.Gateway, *pool)
		if err != nil {
			return err
		}
		o.Engines = urls
	}
	rep, err := bench.RunGateway(ctx, o)
	if err != nil {
		return err
	}
	return printJSON(rep)
}

// gatewayFleet is the in-process fleet of the gateway benchmark: mock engines and a gateway
// (server.Run, the code of `kvrouter serve`) on loopback ports, the engines registered as the workers of
// a pool of their own.
type gatewayFleet struct {
	gateway string   // the gateway's base URL
	engines []string // the engines' base URLs
	model   string
	stop    func()
}

// startGatewayFleet starts n mock engines (virtual time speedup×, streamed tokens at least itl apart in
// wall-clock time) and a gateway over store, with a fresh pool and model name so a shared Redis is never
// disturbed (the pool is left behind, with its workers).
func startGatewayFleet(ctx context.Context, store string, n int, speedup float64, itl, releaseDelay time.Duration) (*gatewayFleet, error) {
	if n < 1 {
		return nil, fmt.Errorf("--engines %d: want >= 1", n)
	}
	tag := fmt.Sprintf("gwbench-%d", time.Now().UnixNano())
	f := &gatewayFleet{model: tag}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fctx, cancel := context.WithCancel(ctx)
	var servers []*mock.Server
	runDone := make(chan error, 1)
	closeAll := func() {
		cancel()
		for _, s := range servers {
			s.Close()
		}
	}
	for i := 0; i < n; i++ {
		s, err := mock.Start(fctx, mock.Config{Name: fmt.Sprintf("e%d", i+1), Model: f.model, Speedup: speedup,
			ITLMs: float64(itl) / float64(time.Millisecond) * speedup, ReplayEndpoint: "none", Seed: uint64(i + 1), Logger: quiet})
		if err != nil {
			closeAll()
			return nil, err
		}
		servers = append(servers, s)
		f.engines = append(f.engines, s.URL())
	}
	cfg := server.DefaultConfig()
	cfg.Addr, cfg.Store, cfg.LogLevel, cfg.LogOutput = "127.0.0.1:0", store, "error", io.Discard
	cfg.ReleaseDelay = releaseDelay
	cfg.Pools = map[string]map[string]any{tag: {"block_size": 16, "models": []string{f.model}}}
	addrc := make(chan net.Addr, 1)
	cfg.OnListening = func(a net.Addr) { addrc <- a }
	go func() { runDone <- server.Run(fctx, cfg) }()
	f.stop = func() { closeAll(); <-runDone }
	select {
	case a := <-addrc:
		f.gateway = "http://" + a.String()
	case err := <-runDone:
		closeAll()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	for i, u := range f.engines {
		b, _ := json.Marshal(map[string]string{"url": u})
		req, _ := http.NewRequestWithContext(ctx, "PUT", fmt.Sprintf("%s/v1/workers/e%d?pool=%s", f.gateway, i+1, tag), bytes.NewReader(b))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("register engine e%d: %w", i+1, err)
		}
	}
	return f, nil
}

// poolWorkerURLs lists the URLs of a pool's workers through the gateway's decision API, page after page
// (GET /v1/workers returns at most one page per call; its "next" is the following page's ?after=).
func poolWorkerURLs(ctx context.Context, base, pool string) ([]string, error) {
	var out []string
	after := ""
	for {
		u := base + "/v1/workers?pool=" + url.QueryEscape(pool)
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("--url: %w", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("--url: GET /v1/workers?pool=%s: %d %s", pool, resp.StatusCode, b)
		}
		var ws struct {
			Workers []struct {
				URL string `json:"url"`
			} `json:"workers"`
			Next string `json:"next"`
		}
		if err := json.Unmarshal(b, &ws); err != nil {
			return nil, fmt.Errorf("--url: workers: %w", err)
		}
		for _, w := range ws.Workers {
			if w.URL != "" {
				out = append(out, w.URL)
			}
		}
		if ws.Next == "" {
			break
		}
		after = ws.Next
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--url: pool %q has no worker with a URL", pool)
	}
	return out, nil
}
