// Command testsummary reads `go test -json` on stdin and prints what plain `go test` prints (package
// result lines, build errors, the output of failed tests), then every skipped test with its skip
// message, grouped by package and message. `make test` pipes the whole suite through it, so that a
// skipped group is visible instead of hiding behind "ok".
//
// Skips are checked against an allow-list of optional skips (optional_skips.txt beside this file,
// embedded; -allow FILE replaces it). Under CI (the environment variable CI set, or -ci) a skip that
// is not on the list fails the run: in CI everything that should run must run.
//
// Exit status: 1 if a test or build failed, or under CI if an unexpected skip occurred; else 0.
//
// Usage: go test -json ./... | go run ./scripts/testsummary [-allow FILE] [-ci]
package main

import (
	_ "embed"
	"flag"
	"fmt"
	"os"
	"strings"
)

//go:embed optional_skips.txt
var defaultAllowList string

func main() {
	allowFile := flag.String("allow", "", "allow-list of optional skips (default: the embedded optional_skips.txt)")
	ci := flag.Bool("ci", os.Getenv("CI") != "", "fail on skips that are not on the allow-list (default: on when CI is set)")
	flag.Parse()
	text := defaultAllowList
	if *allowFile != "" {
		b, err := os.ReadFile(*allowFile)
		if err != nil {
			fatal(err)
		}
		text = string(b)
	}
	rules, err := parseAllowList(text)
	if err != nil {
		fatal(err)
	}
	s := newSummary(os.Stdout, modulePrefix(), rules)
	if err := s.consume(os.Stdin); err != nil {
		fatal(err)
	}
	unexpected := s.report()
	code := 0
	if s.failed {
		fmt.Println("\nFAIL: tests or builds failed (their output is above)")
		code = 1
	}
	if len(unexpected) > 0 {
		if *ci {
			fmt.Printf("\nFAIL (CI): %d skips are not on the allow-list of optional skips (scripts/testsummary/optional_skips.txt); in CI they must run\n", len(unexpected))
			code = 1
		} else {
			fmt.Println("\n(outside CI the skips above are allowed; CI fails on those marked UNEXPECTED)")
		}
	}
	os.Exit(code)
}

// modulePrefix is "MODULE/" from ./go.mod, stripped from package names in the report ("" if absent).
func modulePrefix() string {
	b, err := os.ReadFile("go.mod")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] + "/"
		}
	}
	return ""
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "testsummary:", err)
	os.Exit(2)
}
