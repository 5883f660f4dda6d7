package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/luascripts"
	"github.com/kvrouter/kvrouter/statestore"
)

// poolCommands are the `kvrouter pool <action>` subcommands.
var poolCommands = map[string]command{
	"list":     {name: "list", summary: "every pool of the store: name, knobs, worker count", run: runPoolList},
	"show":     {name: "show", summary: "one pool: knobs and every worker with its ranks' loads and cached blocks", run: runPoolShow},
	"migrate":  {name: "migrate", summary: "convert a pool written by the previous key layout to this one, in place (bounded steps)", run: runPoolMigrate},
	"recreate": {name: "recreate", summary: "drop a pool's keys (any layout) and declare it again with its knobs; workers re-register, events refill the index", run: runPoolRecreate},
}

func init() {
	register(command{name: "pool", summary: "pool administration against --store: list, show, migrate, recreate", run: runPool})
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
	prefix := fs.String("prefix", "", "Redis key prefix of the namespace (default kvr:, the serve default)")
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
	return openStore(*storeURL, storeOptions{prefix: *prefix})
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

// layoutAdmin is the Redis store's key-layout administration (statestore/redis_layout.go).
type layoutAdmin interface {
	MigratePool(ctx context.Context, pool string) (string, error)
	RecreatePool(ctx context.Context, pool string) (string, error)
}

// runLayoutAction runs `pool migrate|recreate NAME` and prints {pool, from_layout, layout}.
func runLayoutAction(ctx context.Context, action string, args []string, do func(layoutAdmin, context.Context, string) (string, error)) error {
	fs := newFlagSet("pool "+action, "pool "+action+" NAME --store redis://host:port [--prefix P]")
	st, err := poolStore(fs, args, 1)
	if err != nil {
		return err
	}
	defer st.Close()
	adm, ok := st.(layoutAdmin)
	if !ok {
		return fmt.Errorf("pool %s: store %s has no key layout", action, st.Name())
	}
	name := fs.Arg(0)
	from, err := do(adm, ctx, name)
	if err != nil {
		return fmt.Errorf("pool %s %q: %w", action, name, err)
	}
	return printJSON(struct {
		Pool       string `json:"pool"`
		FromLayout string `json:"from_layout"`
		Layout     int    `json:"layout"`
	}{name, from, luascripts.Layout})
}

func runPoolMigrate(ctx context.Context, args []string) error {
	return runLayoutAction(ctx, "migrate", args, layoutAdmin.MigratePool)
}

func runPoolRecreate(ctx context.Context, args []string) error {
	return runLayoutAction(ctx, "recreate", args, layoutAdmin.RecreatePool)
}
