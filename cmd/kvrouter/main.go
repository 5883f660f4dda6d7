// Command kvrouter is the KV-cache-aware router's single binary: serve, ingest, mock, simulate, demo,
// bench, hash, replay and index tools. Each subcommand lives in its own file and only wires packages.
package main

import (
	"context"
	"errors"
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

func usage(w io.Writer) {
	fmt.Fprintf(w, "kvrouter — KV-cache-aware request router for LLM inference fleets\n\nUsage: kvrouter <command> [flags]\n\nCommands:\n")
	printCommands(w, commands)
	fmt.Fprintf(w, "\nRun 'kvrouter <command> -h' for a command's flags. Every flag can also be set as KVROUTER_<FLAG>.\n")
}

// printCommands prints one aligned "name  summary" line per command, sorted by name.
func printCommands(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	width := 0
	for n := range cmds {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, cmds[n].summary)
	}
}

// runSubcommand dispatches `kvrouter <group> <name> ...` to cmds; no name, -h or --help prints the list
// (to stdout for help, exit 0; to stderr when the name is missing, exit 2).
func runSubcommand(ctx context.Context, group, what string, cmds map[string]command, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := stdout
		if len(args) == 0 {
			w = os.Stderr
		}
		fmt.Fprintf(w, "Usage: kvrouter %s <%s> [flags]\n\n%ss:\n", group, what, strings.ToUpper(what[:1])+what[1:])
		printCommands(w, cmds)
		fmt.Fprintf(w, "\nRun 'kvrouter %s <%s> -h' for its flags.\n", group, what)
		if len(args) == 0 {
			return errUsage
		}
		return errHelp
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "kvrouter %s: unknown %s %q (kvrouter %s --help lists them)\n", group, what, args[0], group)
		return errUsage
	}
	return c.run(ctx, args[1:])
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program name) and returns the exit status: 0 on success
// and for help, 2 for a bad command line, 1 when the command failed.
func run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	if a := args[0]; a == "-h" || a == "--help" || a == "help" {
		usage(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "kvrouter: unknown command %q\n\n", args[0])
		usage(os.Stderr)
		return 2
	}
	err := c.run(ctx, args[1:])
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(os.Stderr, "kvrouter %s: %v\n", c.name, strings.TrimSpace(err.Error()))
	return 1
}
