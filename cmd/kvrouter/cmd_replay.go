package main

import (
	"context"
	"fmt"
	"os"

	"github.com/kvrouter/kvrouter/core"
)

func init() {
	register(command{name: "replay", summary: "run a JSON-lines replay file (workers, events, routes) and print the decisions", run: runReplay})
}

func runReplay(ctx context.Context, args []string) error {
	fs := newFlagSet("replay", "replay FILE [--store memory|redis://host:port[,host:port...]]\n\nFILE holds one JSON object per line (SPEC §7.1); '-' reads standard input.")
	storeURL := storeFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	in := os.Stdin
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("open replay file: %w", err)
		}
		defer f.Close()
		in = f
	}
	st, err := openStore(*storeURL, storeOptions{fresh: true})
	if err != nil {
		return err
	}
	defer st.Close()
	return core.Replay(ctx, st, in, stdout)
}
