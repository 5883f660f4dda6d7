package main

import (
	"flag"

	"github.com/kvrouter/kvrouter/server"
)

// accessFlags defines serve's and ingest's access-control flags (SPEC §7.3) and returns the function
// that applies those given (set: the flags given on the command line or through KVROUTER_*) onto a.
func accessFlags(fs *flag.FlagSet) func(a *server.Access, set map[string]bool) {
	tokens := fs.String("auth-tokens", "", "file of bearer tokens, one \"SCOPE TOKEN\" per line (SCOPE route: route, explain, done, the OpenAI endpoints; admin: also pools, workers, events); required on a non-loopback --addr")
	insecure := fs.Bool("insecure-no-auth", false, "allow a non-loopback --addr without --auth-tokens (anyone reaching it may register workers and post events; logged as a warning)")
	metrics := fs.String("metrics-addr", "", "serve /metrics on this separate host:port instead of the main address (where it is open to all)")
	return func(a *server.Access, set map[string]bool) {
		if set["auth-tokens"] {
			a.AuthTokens = *tokens
		}
		if set["insecure-no-auth"] {
			a.InsecureNoAuth = *insecure
		}
		if set["metrics-addr"] {
			a.MetricsAddr = *metrics
		}
	}
}
