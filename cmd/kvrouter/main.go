// Command kvrouter is the KV-cache-aware router's single binary: serve, ingest, mock, simulate, demo,
// bench, hash, replay and index tools. Each subcommand lives in its own file and only wires packages.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

// stdout is where commands print their results (tests capture it).
var stdout io.Writer = os.Stdout

func register(c command) { commands[c.name] = c }

func usage() {
	fmt.Fprintf(os.Stderr, "kvrouter — KV-cache-aware request router for LLM inference fleets\n\nUsage: kvrouter <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'kvrouter <command> -h' for a command's flags. Every flag can also be set as KVROUTER_<FLAG>.\n")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "kvrouter: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.run(ctx, os.Args[2:]); err != nil {
		if err == errUsage {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "kvrouter %s: %v\n", c.name, strings.TrimSpace(err.Error()))
		os.Exit(1)
	}
}
