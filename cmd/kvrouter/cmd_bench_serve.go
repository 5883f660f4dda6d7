package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/blockhash"
)

func init() {
	benchCommands["serve"] = command{name: "serve", summary: "HTTP load on `kvrouter serve` over loopback: decisions/s, p50/p99 µs per route call", run: runBenchServe}
}

type serveRun struct {
	Clients       int     `json:"clients"`
	Decisions     int     `json:"decisions"`
	Errors        int     `json:"errors"`
	DecisionsPerS float64 `json:"decisions_per_s"`
	P50us         float64 `json:"p50_us"`
	P90us         float64 `json:"p90_us"`
	P99us         float64 `json:"p99_us"`
}

type serveReport struct {
	Target       string     `json:"target"`
	Store        string     `json:"store"`
	Workers      int        `json:"workers"`
	Prefixes     int        `json:"cached_prefixes"`
	PromptTokens int        `json:"prompt_tokens"`
	BlockSize    int        `json:"block_size"`
	Duration     string     `json:"duration_per_run"`
	Input        string     `json:"input"`
	DonePerRoute bool       `json:"done_after_each_route"`
	Runs         []serveRun `json:"runs"`
}

func runBenchServe(ctx context.Context, args []string) error {
	fs := newFlagSet("bench serve", "bench serve [--url http://host:port | --store memory|redis://…] [--workers N] [--prompt T] [--clients 1,8,32] [--duration D]\n\nWithout --url it starts `kvrouter serve` (this binary) on a free loopback port with --store.")
	url := fs.String("url", "", "an already running server; empty = start one")
	storeURL := storeFlag(fs)
	workers := fs.Int("workers", 64, "workers to register")
	prefixes := fs.Int("prefixes", 256, "cached prefixes, spread over the workers by KV events")
	prompt := fs.Int("prompt", 1024, "prompt length in tokens (token_ids, hashed by the server)")
	blockSize := fs.Int("block-size", 16, "pool block size")
	clientsFlag := fs.String("clients", "1,8,32", "comma-separated concurrent client counts, one run each")
	duration := fs.Duration("duration", 5*time.Second, "length of each run")
	hashes := fs.Bool("local-hashes", false, "send local_hashes (hashed by this client) instead of token_ids")
	noDone := fs.Bool("no-done", false, "do not end each request with POST …/done (leases then pile up until lease_ttl)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	clientCounts, err := parseCounts("clients", *clientsFlag)
	if err != nil {
		return err
	}
	if *workers <= 0 || *prefixes <= 0 || *blockSize <= 0 || *prompt < *blockSize || *duration <= 0 {
		return fmt.Errorf("--workers, --prefixes, --block-size, --duration must be > 0 and --prompt >= --block-size")
	}
	target := *url
	if target == "" {
		addr, stop, err := startServeChild(ctx, *storeURL)
		if err != nil {
			return err
		}
		defer stop()
		target = "http://" + addr
	}
	hc := &fasthttp.Client{MaxConnsPerHost: 1024, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	call := func(method, path string, body []byte) (int, []byte, error) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(target + path)
		req.Header.SetMethod(method)
		req.SetBody(body)
		err := hc.Do(req, resp)
		return resp.StatusCode(), append([]byte(nil), resp.Body()...), err
	}
	must := func(method, path string, body []byte) error {
		st, b, err := call(method, path, body)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		if st != 200 {
			return fmt.Errorf("%s %s: %d %s", method, path, st, b)
		}
		return nil
	}
	// Setup: a fresh pool, workers, and cached prefixes of half the prompt length spread over the workers.
	pool := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	if err := must("PUT", "/v1/pools/"+pool, fmt.Appendf(nil, `{"block_size":%d,"lease_ttl_ms":60000}`, *blockSize)); err != nil {
		return err
	}
	for w := 0; w < *workers; w++ {
		if err := must("PUT", fmt.Sprintf("/v1/workers/w%03d?pool=%s", w, pool), fmt.Appendf(nil, `{"url":"http://10.0.%d.%d:8000"}`, w/256, w%256)); err != nil {
			return err
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	prefixLen := (*prompt / 2) / *blockSize * *blockSize
	prefixToks := make([][]uint32, *prefixes)
	for p := range prefixToks {
		toks := make([]uint32, prefixLen)
		for i := range toks {
			toks[i] = rng.Uint32N(128000)
		}
		prefixToks[p] = toks
		blocks := make([]string, prefixLen / *blockSize)
		for i := range blocks {
			blocks[i] = fmt.Sprintf(`{"block_hash":%d}`, uint64(p)<<20|uint64(i))
		}
		tj, _ := json.Marshal(toks)
		ev := fmt.Sprintf(`[{"worker_id":"w%03d","pool":%q,"event":{"data":{"stored":{"parent_hash":null,"token_ids":%s,"block_size":%d,"blocks":[%s]}}}}]`,
			p%*workers, pool, tj, *blockSize, strings.Join(blocks, ","))
		if err := must("POST", "/v1/events", []byte(ev)); err != nil {
			return err
		}
	}
	// Pre-built request bodies: a cached prefix plus a random suffix.
	bodies := make([][]byte, 512)
	for i := range bodies {
		toks := append([]uint32(nil), prefixToks[rng.IntN(len(prefixToks))]...)
		for len(toks) < *prompt {
			toks = append(toks, rng.Uint32N(128000))
		}
		if *hashes {
			hj, _ := json.Marshal(blockhash.LocalHashes(nil, toks, *blockSize, blockhash.LoRASeed("")))
			bodies[i] = fmt.Appendf(nil, `{"pool":%q,"request_id":"REQ","local_hashes":%s,"isl":%d}`, pool, hj, len(toks))
		} else {
			tj, _ := json.Marshal(toks)
			bodies[i] = fmt.Appendf(nil, `{"pool":%q,"request_id":"REQ","token_ids":%s}`, pool, tj)
		}
	}
	rep := serveReport{Target: target, Store: *storeURL, Workers: *workers, Prefixes: *prefixes, PromptTokens: *prompt,
		BlockSize: *blockSize, Duration: duration.String(), Input: "token_ids", DonePerRoute: !*noDone}
	if *hashes {
		rep.Input = "local_hashes"
	}
	if *url != "" {
		rep.Store = "(external)"
	}
	for run, clients := range clientCounts {
		var mu sync.Mutex
		var lat []time.Duration
		errs := 0
		var wg sync.WaitGroup
		start := time.Now()
		deadline := start.Add(*duration)
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				local := make([]time.Duration, 0, 1<<14)
				nerr := 0
				for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
					id := fmt.Sprintf("r%d-%d-%d", run, c, i)
					body := []byte(strings.Replace(string(bodies[(c*7919+i)%len(bodies)]), `"REQ"`, strconv.Quote(id), 1))
					t0 := time.Now()
					st, _, err := call("POST", "/v1/route", body)
					d := time.Since(t0)
					if err != nil || st != 200 {
						nerr++
						continue
					}
					local = append(local, d)
					if *noDone {
						continue
					}
					// End the request at once so loads stay bounded (not timed).
					call("POST", "/v1/requests/"+id+"/done?pool="+pool, nil)
				}
				mu.Lock()
				lat = append(lat, local...)
				errs += nerr
				mu.Unlock()
			}(c)
		}
		wg.Wait()
		// decisions/s counts route calls only, over the whole run (done calls share the time).
		elapsed := time.Since(start).Seconds()
		slices.Sort(lat)
		pct := func(q float64) float64 {
			if len(lat) == 0 {
				return 0
			}
			return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Nanoseconds()) / 1e3
		}
		rep.Runs = append(rep.Runs, serveRun{Clients: clients, Decisions: len(lat), Errors: errs,
			DecisionsPerS: float64(len(lat)) / elapsed, P50us: pct(0.50), P90us: pct(0.90), P99us: pct(0.99)})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

var listeningRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startServeChild runs `<this binary> serve --addr 127.0.0.1:0 --store URL` and returns its address.
func startServeChild(ctx context.Context, store string) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "serve", "--addr", "127.0.0.1:0", "--store", store, "--log-level", "info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}
	sc := bufio.NewScanner(stderr)
	var log []string
	for sc.Scan() {
		line := sc.Text()
		log = append(log, line)
		if m := listeningRE.FindStringSubmatch(line); m != nil {
			go func() {
				for sc.Scan() {
				}
			}()
			return m[1], stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("kvrouter serve did not start:\n%s", strings.Join(log, "\n"))
}
