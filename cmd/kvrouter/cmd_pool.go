package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// poolCommands are the `kvrouter pool <action>` subcommands.
var poolCommands = map[string]command{
	"list":     {name: "list", summary: "every pool of the store: name, knobs, worker count", run: runPoolList},
	"show":     {name: "show", summary: "one pool: knobs and every worker with its ranks' loads and cached blocks", run: runPoolShow},
	"migrate":  {name: "migrate", summary: "(not yet) rewrite a pool written by another key-layout version", run: runPoolNotYet("migrate")},
	"recreate": {name: "recreate", summary: "(not yet) drop and re-declare a pool written by another key-layout version", run: runPoolNotYet("recreate")},
}

func init() {
	register(command{name: "pool", summary: "pool administration against --store: list, show (migrate, recreate: not yet)", run: runPool})
}

func runPool(ctx context.Context, args []string) error {
	return runSubcommand(ctx, "pool", "action", poolCommands, args)
}

// errPoolMemory: pool administration against the embedded store, which is always empty in a new process.
var errPoolMemory = errors.New("--store memory: a new embedded store is always empty, so there is nothing to administer; " +
	"pass the shared store, e.g. --store redis://host:6379")

// poolStore parses the flags of a pool action and opens its store; nargs is the positional count.
func poolStore(fs *flag.FlagSet, args []string, nargs int) (statestore.Store, error) {
	storeURL := storeFlag(fs)
	timeout := fs.Duration("timeout", 10*time.Second, "bound on the store calls")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() != nargs {
		fs.Usage()
		return nil, errUsage
	}
	if *timeout <= 0 {
		return nil, fmt.Errorf("--timeout must be > 0, got %s", *timeout)
	}
	if *storeURL == "" || *storeURL == "memory" {
		return nil, errPoolMemory
	}
	return openStore(*storeURL, storeOptions{})
}

func runPoolList(ctx context.Context, args []string) error {
	fs := newFlagSet("pool list", "pool list --store redis://host:port")
	st, err := poolStore(fs, args, 0)
	if err != nil {
		return err
	}
	defer st.Close()
	pools, err := st.Pools(ctx)
	if err != nil {
		return fmt.Errorf("list pools: %w", err)
	}
	if pools == nil {
		pools = []statestore.PoolInfo{}
	}
	return printJSON(pools)
}

func runPoolShow(ctx context.Context, args []string) error {
	fs := newFlagSet("pool show", "pool show NAME --store redis://host:port")
	st, err := poolStore(fs, args, 1)
	if err != nil {
		return err
	}
	defer st.Close()
	name := fs.Arg(0)
	cfg, err := st.GetPool(ctx, name)
	if err != nil {
		return fmt.Errorf("pool %q: %w", name, err)
	}
	ws, err := st.Workers(ctx, name, time.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("pool %q: workers: %w", name, err)
	}
	if ws == nil {
		ws = []statestore.WorkerInfo{}
	}
	return printJSON(struct {
		Pool    string                  `json:"pool"`
		Config  statestore.PoolConfig   `json:"config"`
		Workers []statestore.WorkerInfo `json:"workers"`
	}{name, cfg, ws})
}

// runPoolNotYet answers the actions that need the key-layout version (SPEC §8), which the store does not
// record yet: a clear refusal, not a stub that pretends.
func runPoolNotYet(action string) func(context.Context, []string) error {
	return func(_ context.Context, args []string) error {
		fs := newFlagSet("pool "+action, "pool "+action+" NAME --store redis://host:port")
		storeFlag(fs)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		return fmt.Errorf("not yet: pool %s needs the key-layout version that every pool records (SPEC §8 \"Layout version\"), "+
			"which the store does not write yet; it comes with the layout-version work (issue 10)", action)
	}
}
