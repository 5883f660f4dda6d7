package main

import (
	"context"
)

// benchCommands holds the `kvrouter bench <name>` subcommands; each bench file registers itself here
// from an init func (route, ingest, index, …).
var benchCommands = map[string]command{}

func init() {
	register(command{name: "bench", summary: "performance benchmarks printing JSON (route, ingest, index, …)", run: runBench})
}

func runBench(ctx context.Context, args []string) error {
	return runSubcommand(ctx, "bench", "benchmark", benchCommands, args)
}
