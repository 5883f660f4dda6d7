package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/kvrouter/kvrouter/internal/bench"
)

func init() {
	benchCommands["e2e"] = command{name: "e2e", summary: "end-to-end load: route → mock engine → done, KV routing vs round-robin (hit rate, TTFT)", run: runBenchE2E}
}

func runBenchE2E(ctx context.Context, args []string) error {
	fs := newFlagSet("bench e2e", "bench e2e --router http://host:port --workers w1=http://…,w2=http://… [flags]")
	router := fs.String("router", "", "kvrouter serve base URL (for the kv and gateway policies)")
	model := fs.String("model", "", "the model name of gateway requests (one of the pool's models)")
	workersFlag := fs.String("workers", "", "the engines: comma-separated NAME=URL (names as registered in the router)")
	policies := fs.String("policies", "kv,round-robin", "policies to run, in order (kv: client calls route/prefill_done/done; gateway: the router's OpenAI endpoint; round-robin); mocks are restarted before each one but the first")
	requests := fs.Int("requests", 400, "requests per policy")
	conc := fs.Int("concurrency", 8, "requests in flight (closed loop)")
	groups := fs.Int("groups", 32, "distinct shared prefixes")
	prefix := fs.Int("prefix-tokens", 2048, "tokens of each shared prefix")
	suffix := fs.Int("suffix-tokens", 64, "unique tokens after the prefix")
	maxTokens := fs.Int("max-tokens", 8, "output tokens per request")
	seed := fs.Uint64("seed", 1, "workload seed (the same sequence for every policy)")
	restart := fs.Bool("restart", true, "restart every mock engine (POST /admin/restart) before each policy but the first")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o := bench.E2EOptions{Router: *router, Model: *model, Requests: *requests, Concurrency: *conc, Groups: *groups, PrefixTokens: *prefix,
		SuffixTokens: *suffix, MaxTokens: *maxTokens, Seed: *seed, Restart: *restart}
	for _, w := range strings.Split(*workersFlag, ",") {
		n, u, ok := strings.Cut(strings.TrimSpace(w), "=")
		if !ok || n == "" || u == "" {
			return fmt.Errorf("--workers: %q: want NAME=URL", w)
		}
		o.Workers = append(o.Workers, bench.Engine{Name: n, URL: strings.TrimRight(u, "/")})
	}
	for _, p := range strings.Split(*policies, ",") {
		o.Policies = append(o.Policies, strings.TrimSpace(p))
	}
	rep, err := bench.RunE2E(ctx, o)
	if err != nil {
		return err
	}
	return printJSON(rep)
}
