package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench"
)

func init() {
	benchCommands["gateway"] = command{name: "gateway", summary: "the OpenAI-compatible gateway's added latency over calling the engines directly, at a fixed rate (SPEC §9)", run: runBenchGateway}
}

func runBenchGateway(ctx context.Context, args []string) error {
	fs := newFlagSet("bench gateway", "bench gateway [--url http://gateway [--pool P --model M] | --store memory|redis://… --engines N] [--rate R] [--duration D]\n\n"+
		"Sends the same token-array completions, at the same fixed rate, to the engines directly and through the gateway,\n"+
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
	rate := fs.Float64("rate", 0, "fixed request rate, requests/s; 0 = half of the gateway's measured saturation")
	duration := fs.Duration("duration", 5*time.Second, "length of each fixed-rate run (4 runs: direct and gateway, non-streaming and streaming)")
	satDuration := fs.Duration("saturation-duration", 3*time.Second, "length of each saturation run")
	satClients := fs.Int("saturation-clients", 32, "closed-loop clients of the saturation runs")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o := bench.GatewayOptions{Gateway: *gwURL, Store: *storeURL, Model: *model, PromptTokens: *prompt, Prompts: *prompts,
		MaxTokens: *maxTokens, StreamTokens: *streamTokens, Rate: *rate, Duration: *duration,
		SaturationDuration: *satDuration, SaturationClients: *satClients}
	if o.Gateway == "" {
		f, err := bench.StartGatewayFleet(ctx, *storeURL, *engines, *speedup, *itl)
		if err != nil {
			return err
		}
		defer f.Stop()
		o.Gateway, o.Engines, o.Model = f.Gateway, f.Engines, f.Model
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

// poolWorkerURLs lists the URLs of a pool's workers through the gateway's decision API.
func poolWorkerURLs(ctx context.Context, base, pool string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/workers?pool="+url.QueryEscape(pool), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("--url: GET /v1/workers?pool=%s: %d %s", pool, resp.StatusCode, b)
	}
	var ws struct {
		Workers []struct {
			URL string `json:"url"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(b, &ws); err != nil {
		return nil, fmt.Errorf("--url: workers: %w", err)
	}
	var out []string
	for _, w := range ws.Workers {
		if w.URL != "" {
			out = append(out, w.URL)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--url: pool %q has no worker with a URL", pool)
	}
	return out, nil
}
