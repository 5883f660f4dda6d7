package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// textLogger returns a text logger on stderr at a --log-level (debug, info, warn or error).
func textLogger(level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %v", level, err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})), nil
}

// parseCounts parses a comma-separated list of positive integers (e.g. --clients 1,16,64).
func parseCounts(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--%s: bad count %q", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}
