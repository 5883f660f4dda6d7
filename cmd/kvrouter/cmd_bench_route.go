package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/kvrouter/kvrouter/statestore"
)

func init() {
	benchCommands["route"] = command{name: "route", summary: "routing decisions: decisions/s, p50/p99/max µs (closed and open loop), Redis CPU per decision", run: runBenchRoute}
}

// newBenchReleaser builds `--release-delay`'s bench.Releaser (cmd_bench_release.go; nil in a build whose
// store has no RouteRequest.Releases, e.g. an older revision bench-compare.sh -g grafted this file onto).
var newBenchReleaser func(st statestore.Store, delay time.Duration) bench.Releaser

func runBenchRoute(ctx context.Context, args []string) error {
	fs := newFlagSet("bench route", "bench route [--store memory,redis://…] [--workers 16,64,…] [--prompt 64,512,…] [--blocks M] [--sharing K]\n"+
		"                   [--clients 1,16] [--duration D | --routes N] [--rate R|half [--senders S] [--spin-tail D] [--settle D] [--calls-out FILE]] [--repeat N] [--no-done | --release-delay D]\n"+
		"                   [--slowlog-us US] [--prefix P] [--route-script LIB.lua:ROUTE.lua,...]\n\n"+
		"One run per (workers, prompt, store, clients) combination, each repeated --repeat times; JSON on stdout\n"+
		"(every run and the median/min/max summaries), a text table on stderr. Redis figures are INFO deltas over\n"+
		"each measured phase (docs/PERFORMANCE.md, \"How Redis figures are taken\"); the benchmark writes only under\n"+
		"a fresh key namespace, deletes it afterwards, and never resets or flushes the server.")
	storeURL := storeFlag(fs)
	workersFlag := fs.String("workers", "64", "comma-separated worker counts, one index each")
	blocks := fs.Int("blocks", 1000000, "indexed (block, worker) entries")
	promptFlag := fs.String("prompt", "64", "comma-separated blocks per prompt, one index each")
	sharing := fs.Int("sharing", bench.DefaultSharing, "workers holding each indexed chain (as in fleets where a hot prefix is cached on several workers)")
	clientsFlag := fs.String("clients", "1,16", "comma-separated concurrent client counts (open loop: senders), one run each")
	duration := fs.Duration("duration", 3*time.Second, "length of each run (unless --routes)")
	routes := fs.Int("routes", 0, "decisions per client per run instead of --duration (0 = use --duration)")
	rateFlag := fs.String("rate", "", "also run open loop at this many decisions/s, or \"half\" of the closed-loop run's decisions/s; empty = closed loop only")
	senders := fs.Int("senders", 64, "most decisions in flight in an open-loop run (at least the run's clients), so the rate holds through a stall")
	spinTail := spinTailFlag(fs)
	settleFor := settleFlag(fs, "before each open-loop run (after its closed-loop run)")
	promptPool := fs.Int("prompt-pool", 1024, "prompts hashed before the runs; decisions draw from them (client work outside the timed window)")
	noDone := fs.Bool("no-done", false, "do not call done after each decision (loads grow through the run)")
	releaseDelay := fs.Duration("release-delay", 0, "carry each decision's done as the router does (`serve --release-delay`: on the next route of the pool, or alone after this long); 0 = each done its own call right after the decision")
	repeat := fs.Int("repeat", 3, "runs per combination (median, min, max reported)")
	calibrate := fs.Int("calibrate", 1000, "sequential decisions, then done calls, per repeat to split Redis CPU between route and done (Redis only); 0 = skip")
	slowlogUs := fs.Int64("slowlog-us", 0, "set slowlog-log-slower-than to this many µs for the run and restore it after (only with this flag is the server's config changed); 0 = leave it")
	predTTL := fs.Duration("predicted-ttl", 0, "pool predicted_ttl (predict-on-route: each decision books the prompt's blocks as soft entries); 0 = off")
	prefix := fs.String("prefix", "", "Redis key prefix to keep the indexes in between runs (loaded only when missing, never deleted); empty = a fresh namespace, deleted after")
	callsOut := fs.String("calls-out", "", "write every open-loop call (run, slot, scheduled time, send lag, service, latency; µs) to this file as tab-separated rows, for the tail's shape in time (scripts/tail_bursts.py)")
	scripts := fs.String("route-script", "", "comma-separated route-script variants LIB.lua:ROUTE.lua (the script is the generated knobs_gen.lua + LIB + ROUTE, as luascripts.Source builds it); each is timed against the same index (Redis only)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o := bench.RouteOptions{Blocks: *blocks, Sharing: *sharing, Duration: *duration, Routes: *routes, NoDone: *noDone,
		Repeat: *repeat, Senders: *senders, SpinTail: *spinTail, Settle: *settleFor, PromptPool: *promptPool, Calibrate: *calibrate, PredictedTTLMs: predTTL.Milliseconds(), Log: os.Stderr}
	if *calibrate == 0 {
		o.Calibrate = -1
	}
	if *releaseDelay > 0 {
		if newBenchReleaser == nil {
			return fmt.Errorf("--release-delay: this build's store cannot carry dones on routes")
		}
		o.NewReleaser = func(st statestore.Store) bench.Releaser { return newBenchReleaser(st, *releaseDelay) }
		o.ReleaseDelayMs = float64(releaseDelay.Microseconds()) / 1e3
	}
	var err error
	if o.Workers, err = parseCounts("workers", *workersFlag); err != nil {
		return err
	}
	if o.PromptBlocks, err = parseCounts("prompt", *promptFlag); err != nil {
		return err
	}
	if o.Clients, err = parseCounts("clients", *clientsFlag); err != nil {
		return err
	}
	switch *rateFlag {
	case "":
	case "half":
		o.RateHalf = true
	default:
		if o.Rate, err = strconv.ParseFloat(*rateFlag, 64); err != nil || o.Rate <= 0 {
			return fmt.Errorf("--rate %q: want decisions/s > 0 or \"half\"", *rateFlag)
		}
	}
	if *repeat < 1 || *routes < 0 || *sharing < 1 || *senders < 1 || *promptPool < 1 || *calibrate < 0 || *slowlogUs < 0 || *spinTail < 0 || *settleFor < 0 {
		return fmt.Errorf("--repeat, --sharing, --senders and --prompt-pool must be >= 1, --routes, --calibrate, --slowlog-us, --spin-tail and --settle >= 0")
	}
	var names, sources []string
	for _, pair := range strings.Split(*scripts, ",") {
		if pair != "" {
			src, err := routeScriptVariant(pair)
			if err != nil {
				return err
			}
			names, sources = append(names, pair), append(sources, src)
		}
	}
	var targets []bench.RouteTarget
	for _, url := range splitStoreList(*storeURL) {
		if len(sources) > 0 && url == "memory" {
			return fmt.Errorf("--route-script needs Redis stores only")
		}
		if *slowlogUs > 0 && url != "memory" {
			restore, err := setSlowlog(ctx, url, *slowlogUs)
			if err != nil {
				return err
			}
			defer restore()
		}
		targets = append(targets, routeTarget(url, *prefix, names, sources))
	}
	if *callsOut != "" {
		f, err := os.Create(*callsOut)
		if err != nil {
			return fmt.Errorf("--calls-out: %w", err)
		}
		defer f.Close()
		o.CallsOut = f
	}
	rep, err := bench.RunRoute(ctx, targets, o)
	if err != nil {
		return err
	}
	return printJSON(rep)
}

// routeTarget opens url's variants (the embedded route script, or each --route-script source) in one
// namespace per (workers, prompt) combination: the fixed --prefix, or a fresh one.
func routeTarget(url, prefix string, names, sources []string) bench.RouteTarget {
	return bench.RouteTarget{Name: url, Keep: prefix != "", Open: func() ([]bench.RouteVariant, error) {
		so := storeOptions{fresh: true, prefix: prefix}
		if so.prefix == "" && url != "memory" {
			so.prefix = statestore.FreshPrefix() // every variant sees the same index
		}
		if len(sources) == 0 {
			st, err := openStore(url, so)
			if err != nil {
				return nil, err
			}
			return []bench.RouteVariant{{Name: "embedded", Store: st}}, nil
		}
		var vs []bench.RouteVariant
		for i, src := range sources {
			o := so
			o.routeScript = src
			st, err := openStore(url, o)
			if err != nil {
				for _, v := range vs {
					v.Store.Close()
				}
				return nil, err
			}
			vs = append(vs, bench.RouteVariant{Name: names[i], Store: st})
		}
		return vs, nil
	}}
}

// splitStoreList splits a --store list ("memory,redis://a:1") into stores: a new store starts at
// "memory" or at an element with a scheme; other elements continue the previous one (a cluster's
// seed list, redis://h1:p1,h2:p2). List several stores with schemes.
func splitStoreList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if len(out) == 0 || e == "memory" || strings.Contains(e, "://") || out[len(out)-1] == "memory" {
			out = append(out, e)
			continue
		}
		out[len(out)-1] += "," + e
	}
	return out
}

// setSlowlog sets url's slowlog-log-slower-than (µs) for the benchmark and returns the restore.
func setSlowlog(ctx context.Context, url string, us int64) (func(), error) {
	st, err := openStore(url, storeOptions{fresh: true})
	if err != nil {
		return nil, err
	}
	rs, ok := st.(*statestore.Redis)
	if !ok {
		st.Close()
		return func() {}, nil
	}
	restore, err := rs.SetSlowlogThreshold(ctx, us)
	if err != nil {
		st.Close()
		return nil, err
	}
	return func() {
		if err := restore(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "bench: restoring slowlog-log-slower-than on %s: %v\n", url, err)
		}
		st.Close()
	}, nil
}

// routeScriptVariant reads a LIB.lua:ROUTE.lua pair into one script source: the knobs_gen.lua beside LIB
// (the generated prelude; absent in layouts before it), LIB, then ROUTE, as luascripts.Source joins them.
// It reads the prelude from disk, not from the luascripts package, so scripts/bench-compare.sh -g can
// graft this file onto revisions older than the prelude.
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
	prelude, err := os.ReadFile(filepath.Join(filepath.Dir(libPath), "knobs_gen.lua"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("--route-script: %w", err)
	}
	// The body runs as a function of its own, as luascripts.WrapBody and the library do (Lua's limit of 200
	// locals per function); written out here so this file needs nothing from package luascripts. A route.lua
	// written as a module (luascripts.Script.Module) returns the operation instead of a reply: it is then
	// called, so ROUTE may come from a revision of either form.
	return string(prelude) + "\n" + string(lib) + "\nlocal function kvr_op(KEYS, ARGV)\n" + string(body) + "\nend\n" +
		"local kvr_r = kvr_op(KEYS, ARGV)\nif type(kvr_r) == 'function' then return kvr_r(KEYS, ARGV) end\nreturn kvr_r\n", nil
}

// settleFlag is --settle of the open-loop benchmarks (bench route --rate, bench floor): the pause before an
// open-loop run that may follow a saturating phase (bench.DefaultSettle); when says which runs get it.
func settleFlag(fs *flag.FlagSet, when string) *time.Duration {
	return fs.Duration("settle", bench.DefaultSettle, "pause "+when+", so a saturating phase's spent real-time budget (a SCHED_FIFO Redis, as the scripts pin it: throttled up to ~50 ms per 1-s period) is not inherited by the open loop; 0 = none")
}

// spinTailFlag is --spin-tail of the open-loop benchmarks (bench route --rate, bench floor): how long
// before a call's scheduled time its sender stops sleeping and spins, so the generator's own wake-up is
// not counted as latency (bench.RouteOptions.SpinTail).
func spinTailFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("spin-tail", bench.DefaultSpinTail, "open loop against a Redis store (not the embedded one, whose CPU the spinning would take): a sender sleeps until this long before its call's scheduled time and spins the rest (at most 4 at once), so the generator's wake-up lag is not counted as latency; 0 = sleep only")
}
