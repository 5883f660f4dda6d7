package main

import (
	"context"
	"fmt"
	"os"
	"sort"
)

// benchCommands holds the `kvrouter bench <name>` subcommands; each bench file registers itself here
// from an init func (route, ingest, index, …).
var benchCommands = map[string]command{}

func init() {
	register(command{name: "bench", summary: "performance benchmarks printing JSON (route, ingest, index, …)", run: runBench})
}

func runBench(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		names := make([]string, 0, len(benchCommands))
		for n := range benchCommands {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "Usage: kvrouter bench <benchmark> [flags]\n\nBenchmarks:\n")
		for _, n := range names {
			fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, benchCommands[n].summary)
		}
		return errUsage
	}
	c, ok := benchCommands[args[0]]
	if !ok {
		return fmt.Errorf("unknown benchmark %q", args[0])
	}
	return c.run(ctx, args[1:])
}
