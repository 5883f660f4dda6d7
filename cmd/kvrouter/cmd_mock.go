package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/simulation/engine"
	"github.com/kvrouter/kvrouter/simulation/mock"
)

func init() {
	register(command{name: "mock", summary: "simulated inference engines: OpenAI API, vLLM metrics and ZMQ KV events, fault switches", run: runMock})
}

func runMock(ctx context.Context, args []string) error {
	fs := newFlagSet("mock", "mock [--engines N] [--host H] [--http-port P] [--zmq-port P] [engine flags...]")
	n := fs.Int("engines", 1, "number of simulated engines in this process")
	prefix := fs.String("name-prefix", "w", "engine names are <prefix>1..<prefix>N")
	host := fs.String("host", "127.0.0.1", "listen host for HTTP and ZMQ")
	httpPort := fs.Int("http-port", 8000, "HTTP port of the first engine (engine i listens on port+i); 0 = ephemeral ports")
	zmqPort := fs.Int("zmq-port", 5557, "KV event PUB port of the first engine: engine i publishes on port+2i and replays on port+2i+1; 0 = ephemeral ports")
	noReplay := fs.Bool("no-replay", false, "do not open the ROUTER replay socket")
	replayBuf := fs.Int("replay-buffer", 10000, "replay buffer size, messages (vLLM's buffer_steps)")
	model := fs.String("model", "mock-model", "served model name")
	speedup := fs.Float64("speedup", 1, "virtual time runs this many times faster than the wall clock")
	blockSize := fs.Int("block-size", 16, "KV block size, tokens (published in BlockStored)")
	numBlocks := fs.Int("num-blocks", 0, "KV cache capacity per engine, blocks (default 384000/block-size)")
	maxBatched := fs.Int("max-num-batched-tokens", 0, "per-step token budget (default 8192)")
	maxSeqs := fs.Int("max-num-seqs", 0, "most running requests (default 256)")
	defMax := fs.Int("default-max-tokens", 16, "output tokens when a request sets no max_tokens")
	multimodal := fs.Bool("multimodal", false, "accept image content parts in chat (URL or data URI, optional \"uuid\"): each expands to --image-tokens placeholder tokens (id 99, wrapped in 97/98), its identity is folded into the blocks it covers and published in BlockStored extra_keys like vLLM; pair with the pool knob image_token_id 99")
	imageTokens := fs.Int("image-tokens", 32, "with --multimodal: placeholder tokens per image")
	dropEvents := fs.Int("drop-events", 0, "fault: drop the next N event messages (replayable)")
	dropProb := fs.Float64("drop-prob", 0, "fault: drop each event message with this probability")
	dupEvents := fs.Int("duplicate-events", 0, "fault: publish the next N event messages twice")
	delayEvents := fs.Float64("delay-events-ms", 0, "fault: delay every event message, ms")
	errorProb := fs.Float64("error-prob", 0, "fault: answer completions with --error-status with this probability")
	errorStatus := fs.Int("error-status", 503, "fault: HTTP status of injected errors")
	slowMs := fs.Float64("slow-ms", 0, "fault: delay every completion response, ms")
	failMidStream := fs.Int("fail-mid-stream-after", 0, "fault: cut every streamed completion's connection after N token chunks, like a crashed engine (0 = off)")
	itlMs := fs.Float64("itl-ms", 0, "least interval between streamed tokens, virtual ms (0 = the engine model's pace: each token at the end of the step that decodes it, ~6 ms at batch 1)")
	seed := fs.Uint64("seed", 1, "seed of the fault injection's random numbers")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	logger, err := textLogger(*logLevel)
	if err != nil {
		return err
	}
	switch {
	case *n < 1 || *n > 1024:
		return fmt.Errorf("--engines %d: must be in [1, 1024]", *n)
	case *httpPort < 0 || *httpPort+*n > 65536:
		return fmt.Errorf("--http-port %d: out of range for %d engines", *httpPort, *n)
	case *zmqPort < 0 || *zmqPort+2**n > 65536:
		return fmt.Errorf("--zmq-port %d: out of range for %d engines", *zmqPort, *n)
	case *dropProb < 0 || *dropProb > 1 || *errorProb < 0 || *errorProb > 1:
		return fmt.Errorf("--drop-prob and --error-prob must be in [0, 1]")
	case *errorStatus < 400 || *errorStatus > 599:
		return fmt.Errorf("--error-status %d: must be 4xx or 5xx", *errorStatus)
	case *dropEvents < 0 || *dupEvents < 0 || *delayEvents < 0 || *slowMs < 0:
		return fmt.Errorf("fault counts and delays must be >= 0")
	case *imageTokens < 1:
		return fmt.Errorf("--image-tokens %d: must be >= 1", *imageTokens)
	}
	imgToks := 0
	if *multimodal {
		imgToks = *imageTokens
	}
	port := func(base, off int) string {
		if base == 0 {
			return net.JoinHostPort(*host, "0")
		}
		return net.JoinHostPort(*host, strconv.Itoa(base+off))
	}
	servers := make([]*mock.Server, 0, *n)
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for i := 0; i < *n; i++ {
		name := *prefix + strconv.Itoa(i+1)
		replay := "tcp://" + port(*zmqPort, 2*i+1)
		if *noReplay {
			replay = "none"
		}
		cfg := mock.Config{
			Name: name, Model: *model, Speedup: *speedup,
			HTTPAddr: port(*httpPort, i), ZMQEndpoint: "tcp://" + port(*zmqPort, 2*i), ReplayEndpoint: replay,
			ReplayBuffer: *replayBuf, DefaultMaxTokens: *defMax, ImageTokens: imgToks, ITLMs: *itlMs, Seed: *seed + uint64(i), Logger: logger,
			Engine: engine.Options{BlockSize: *blockSize, NumBlocks: *numBlocks, MaxNumBatchedTokens: *maxBatched,
				MaxNumSeqs: *maxSeqs, Salt: uint64(i + 1)},
			Faults: mock.Faults{DropEvents: *dropEvents, DropProb: *dropProb, DuplicateEvents: *dupEvents,
				DelayEventsMs: *delayEvents, ErrorProb: *errorProb, ErrorStatus: *errorStatus, SlowMs: *slowMs,
				FailMidStreamAfter: *failMidStream},
		}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("invalid configuration: %v", err)
		}
		s, err := mock.Start(ctx, cfg)
		if err != nil {
			return err
		}
		servers = append(servers, s)
		logger.Info("engine ready", "name", name, "http", s.URL(), "events", s.EventsAddr(),
			"replay", s.ReplayAddr(), "block_size", *blockSize, "num_blocks", s.Blocks().NumBlocks)
	}
	specs := engineFlags(servers)
	logger.Info("all engines ready", "count", len(servers), "ingest_flags", strings.Join(specs, " "))
	if err := printEngineFlags(stdout, specs); err != nil {
		return err
	}
	<-ctx.Done()
	logger.Info("stopping")
	return nil
}

// engineFlags are the --engine flags of `kvrouter serve` and `kvrouter ingest` for the engines.
func engineFlags(servers []*mock.Server) []string {
	specs := make([]string, len(servers))
	for i, s := range servers {
		specs[i] = "--engine " + s.Blocks().Name + "=" + s.EventsAddr()
		if r := s.ReplayAddr(); r != "" {
			specs[i] += ",replay=" + r
		}
		specs[i] += ",url=" + s.URL()
	}
	return specs
}

// printEngineFlags prints the flags on stdout, one per line and continued with a backslash, so the
// block pastes after `kvrouter serve --store memory \` (or `kvrouter ingest … \`) in a shell. Nothing
// else goes to stdout; logs go to stderr.
func printEngineFlags(w io.Writer, specs []string) error {
	var b strings.Builder
	for i, s := range specs {
		b.WriteString("  " + s)
		if i < len(specs)-1 {
			b.WriteString(" \\")
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
