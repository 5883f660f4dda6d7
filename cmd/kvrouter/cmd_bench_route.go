package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/kvrouter/kvrouter/luascripts"
	"github.com/kvrouter/kvrouter/statestore"
)

func init() {
	benchCommands["route"] = command{name: "route", summary: "routing decisions: decisions/s, client p50/p99 µs, Redis µs per decision", run: runBenchRoute}
}

func runBenchRoute(ctx context.Context, args []string) error {
	fs := newFlagSet("bench route", "bench route [--store memory|redis://…] [--workers N] [--blocks M] [--prompt B] [--clients 1,16,64] [--duration D | --routes N]\n"+
		"                   [--prefix P] [--route-script LIB.lua:ROUTE.lua,... [--rounds R]]\n\n"+
		"Profiling Redis: --prefix keeps the index between runs (loaded once), --clients 1 --routes N makes N sequential\n"+
		"decisions, --route-script times variants of the route script against the same index.")
	storeURL := storeFlag(fs)
	workers := fs.Int("workers", 64, "workers in the pool")
	blocks := fs.Int("blocks", 1000000, "indexed (block, worker) entries")
	prompt := fs.Int("prompt", 64, "blocks per prompt")
	clientsFlag := fs.String("clients", "1,16,64", "comma-separated concurrent client counts, one run each")
	duration := fs.Duration("duration", 3*time.Second, "length of each run (unless --routes)")
	routes := fs.Int("routes", 0, "decisions per client per run instead of --duration (0 = use --duration)")
	predTTL := fs.Duration("predicted-ttl", 0, "pool predicted_ttl (predict-on-route: each decision books the prompt's blocks as soft entries); 0 = off")
	prefix := fs.String("prefix", "", "Redis key prefix to keep the index in between runs (loaded only when its pool is missing); empty = a fresh namespace per run")
	scripts := fs.String("route-script", "", "comma-separated route-script variants LIB.lua:ROUTE.lua (the script is the generated knobs_gen.lua + LIB + ROUTE, as luascripts.Source builds it); each is timed against the same index (Redis only)")
	rounds := fs.Int("rounds", 1, "repeat every run this many times, variants alternated within a round")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	clientCounts, err := parseCounts("clients", *clientsFlag)
	if err != nil {
		return err
	}
	if *rounds < 1 || *routes < 0 {
		return fmt.Errorf("--rounds must be >= 1 and --routes >= 0")
	}
	sopts := storeOptions{fresh: true, prefix: *prefix}
	if *prefix == "" && *scripts != "" { // every variant must see the same index
		sopts.prefix = statestore.FreshPrefix()
	}
	var variants []bench.RouteVariant
	if *scripts == "" {
		st, err := openStore(*storeURL, sopts)
		if err != nil {
			return err
		}
		defer st.Close()
		variants = append(variants, bench.RouteVariant{Name: "embedded", Store: st})
	}
	for _, pair := range strings.Split(*scripts, ",") {
		if pair == "" {
			continue
		}
		src, err := routeScriptVariant(pair)
		if err != nil {
			return err
		}
		o := sopts
		o.routeScript = src
		st, err := openStore(*storeURL, o)
		if err != nil {
			return err
		}
		defer st.Close()
		if _, ok := st.(*statestore.Redis); !ok {
			return fmt.Errorf("--route-script needs a Redis --store")
		}
		variants = append(variants, bench.RouteVariant{Name: pair, Store: st})
	}
	rep, err := bench.RunRoute(ctx, variants, bench.RouteOptions{Workers: *workers, Blocks: *blocks, PromptBlocks: *prompt,
		Clients: clientCounts, Duration: *duration, Routes: *routes, PredictedTTLMs: predTTL.Milliseconds(),
		Reuse: *prefix != "", Rounds: *rounds})
	if err != nil {
		return err
	}
	return printJSON(rep)
}

// routeScriptVariant reads a LIB.lua:ROUTE.lua pair into one script source.
func routeScriptVariant(pair string) (string, error) {
	libPath, routePath, ok := strings.Cut(pair, ":")
	if !ok {
		return "", fmt.Errorf("--route-script %q: want LIB.lua:ROUTE.lua", pair)
	}
	lib, err := os.ReadFile(libPath)
	if err != nil {
		return "", fmt.Errorf("--route-script: %w", err)
	}
	body, err := os.ReadFile(routePath)
	if err != nil {
		return "", fmt.Errorf("--route-script: %w", err)
	}
	return luascripts.Knobs() + "\n" + string(lib) + "\n" + string(body), nil // as luascripts.Source joins them
}
