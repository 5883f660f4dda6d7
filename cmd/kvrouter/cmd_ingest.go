package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/kvrouter/kvrouter/server"
)

func init() {
	register(command{name: "ingest", summary: "KV event ingest: vLLM/SGLang ZMQ subscribers and POST /v1/events into the state store", run: runIngest})
}

// engineFlagHelp documents the value of --engine (serve and ingest).
const engineFlagHelp = "Repeatable; KVROUTER_ENGINE takes a space-separated list. " +
	"`SPEC` = WORKER=tcp://host:port[,replay=tcp://host:port][,dp=N][,url=http://host:port][,topic=T]: " +
	"WORKER is the worker id; replay= the engine's ZMQ replay (ROUTER) socket, used to fill gaps; dp= the data-parallel rank " +
	"of batches that carry none (default 0); url= the worker's HTTP URL returned by /v1/route; topic= the ZMQ " +
	"subscription prefix (default empty = every topic, as vLLM publishes)"

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runIngest(ctx context.Context, args []string) error {
	fs := newFlagSet("ingest", "ingest --store memory|redis://... --engine w1=tcp://host:5557[,replay=tcp://host:5558][,dp=0][,url=http://host:8000] ...")
	def := server.DefaultIngestConfig()
	storeURL := storeFlag(fs)
	redisTimeout := fs.Duration("redis-timeout", 0, "bound on one Redis command's write and reply (0 = 15s)")
	var engines multiFlag
	fs.Var(&engines, "engine", "an engine to subscribe to. "+engineFlagHelp)
	pool := fs.String("pool", def.Pool, "pool of the engines (created with --block-size if missing)")
	blockSize := fs.Int("block-size", def.BlockSize, "the pool's KV block size, tokens (must equal the engines')")
	addr := fs.String("addr", def.Addr, "HTTP listen address for /v1/events, /metrics, /healthz (port 0 picks a free port)")
	queue := fs.Int("queue-size", def.QueueSize, "decoded messages buffered per engine before back-pressure")
	maxMsg := fs.Int("max-message-bytes", def.MaxMessageBytes, "largest ZMQ message (all frames) accepted from an engine, bytes; a larger one closes that engine's connection and is counted (0 = 16 MiB)")
	probe := fs.Duration("restart-probe", def.RestartProbeInterval, "ask an idle engine's replay socket this often whether it restarted, clearing its index if so (0 = 10s, negative = off)")
	shutdownTimeout := fs.Duration("shutdown-timeout", def.ShutdownTimeout, "drain time on SIGTERM/SIGINT")
	logLevel := fs.String("log-level", def.LogLevel, "debug, info, warn or error")
	capturePath := fs.String("capture", "", "append every engine message to the event log `FILE` (capture lines, read by the index command); empty = off")
	applyAccess := accessFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg := def
	cfg.Addr, cfg.Store, cfg.Engines, cfg.Pool, cfg.BlockSize = *addr, *storeURL, engines, *pool, *blockSize
	cfg.QueueSize, cfg.ShutdownTimeout, cfg.LogLevel = *queue, *shutdownTimeout, *logLevel
	cfg.RedisTimeout = *redisTimeout
	cfg.MaxMessageBytes, cfg.RestartProbeInterval = *maxMsg, *probe
	if *capturePath != "" {
		f, err := os.OpenFile(*capturePath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("--capture: %w", err)
		}
		defer f.Close()
		cfg.Capture = f
	}
	applyAccess(&cfg.Access, set)
	return server.RunIngest(ctx, cfg)
}
