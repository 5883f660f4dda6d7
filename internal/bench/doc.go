// Package bench holds the drivers behind `kvrouter bench` (synthetic indexes, route and ingest load,
// HTTP load on `kvrouter serve`, the end-to-end load through mock engines, the trace-driven index
// timeline) and the child-process harness the benchmarks and the integration tests share: start a
// kvrouter subcommand, capture its log, wait for its ready lines, stop it with SIGTERM.
//
// The drivers take Options and return a report struct that marshals to the JSON the command prints;
// the command only parses flags and prints.
package bench
