package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/blockhash"
)

// ServeOptions configure RunServe. Every count must be > 0.
type ServeOptions struct {
	// URL is the server's base URL ("http://127.0.0.1:8080").
	URL string
	// Store names the server's store in the report ("(external)" for a server this run did not start).
	Store string
	// Workers are registered in a fresh pool; Prefixes cached prefixes of half the prompt are spread over
	// them by KV events.
	Workers, Prefixes int
	// PromptTokens per route call (>= BlockSize); BlockSize of the pool, tokens.
	PromptTokens, BlockSize int
	// Clients: one run per count, that many concurrent clients each.
	Clients []int
	// Duration of each run.
	Duration time.Duration
	// LocalHashes sends local_hashes hashed by the client instead of token_ids.
	LocalHashes bool
	// NoDone leaves leases open (they pile up until lease_ttl) instead of ending each request.
	NoDone bool
}

// ServeRun is one run's measurements.
type ServeRun struct {
	Clients       int     `json:"clients"`
	Decisions     int     `json:"decisions"`
	Errors        int     `json:"errors"`
	DecisionsPerS float64 `json:"decisions_per_s"`
	P50us         float64 `json:"p50_us"`
	P90us         float64 `json:"p90_us"`
	P99us         float64 `json:"p99_us"`
}

// ServeReport is what `kvrouter bench serve` prints.
type ServeReport struct {
	Target       string     `json:"target"`
	Store        string     `json:"store"`
	Workers      int        `json:"workers"`
	Prefixes     int        `json:"cached_prefixes"`
	PromptTokens int        `json:"prompt_tokens"`
	BlockSize    int        `json:"block_size"`
	Duration     string     `json:"duration_per_run"`
	Input        string     `json:"input"`
	DonePerRoute bool       `json:"done_after_each_route"`
	Runs         []ServeRun `json:"runs"`
}

func (o ServeOptions) validate() error {
	if o.Workers <= 0 || o.Prefixes <= 0 || o.BlockSize <= 0 || o.PromptTokens < o.BlockSize || o.Duration <= 0 || len(o.Clients) == 0 {
		return errors.New("workers, prefixes, block size, duration and clients must be > 0 and the prompt >= the block size")
	}
	return nil
}

// httpCaller sends requests to one base URL over fasthttp (keep-alive, up to 1024 connections).
type httpCaller struct {
	base string
	c    *fasthttp.Client
}

func newHTTPCaller(base string) *httpCaller {
	return &httpCaller{base: base, c: &fasthttp.Client{MaxConnsPerHost: 1024, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}}
}

func (h *httpCaller) call(method, path string, body []byte) (int, []byte, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(h.base + path)
	req.Header.SetMethod(method)
	req.SetBody(body)
	err := h.c.Do(req, resp)
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), err
}

func (h *httpCaller) must(method, path string, body []byte) error {
	st, b, err := h.call(method, path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if st != 200 {
		return fmt.Errorf("%s %s: %d %s", method, path, st, b)
	}
	return nil
}

// RunServe loads a running `kvrouter serve` over HTTP: it creates a fresh pool with workers and cached
// prefixes, then for each client count runs closed-loop route calls (each followed by an untimed done
// unless NoDone) for Duration, measuring decisions/s and route latency.
func RunServe(ctx context.Context, o ServeOptions) (ServeReport, error) {
	rep := ServeReport{Target: o.URL, Store: o.Store, Workers: o.Workers, Prefixes: o.Prefixes, PromptTokens: o.PromptTokens,
		BlockSize: o.BlockSize, Duration: o.Duration.String(), Input: "token_ids", DonePerRoute: !o.NoDone}
	if o.LocalHashes {
		rep.Input = "local_hashes"
	}
	if err := o.validate(); err != nil {
		return rep, err
	}
	h := newHTTPCaller(o.URL)
	pool := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	bodies, err := setupServePool(h, pool, o)
	if err != nil {
		return rep, err
	}
	for run, clients := range o.Clients {
		var mu sync.Mutex
		var lat []time.Duration
		errs := 0
		var wg sync.WaitGroup
		start := time.Now()
		deadline := start.Add(o.Duration)
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
					st, _, err := h.call("POST", "/v1/route", body)
					d := time.Since(t0)
					if err != nil || st != 200 {
						nerr++
						continue
					}
					local = append(local, d)
					if !o.NoDone { // end the request at once so loads stay bounded (not timed)
						h.call("POST", "/v1/requests/"+id+"/done?pool="+pool, nil)
					}
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
		sortDurations(lat)
		rep.Runs = append(rep.Runs, ServeRun{Clients: clients, Decisions: len(lat), Errors: errs,
			DecisionsPerS: float64(len(lat)) / elapsed, P50us: quantileUs(lat, 0.50), P90us: quantileUs(lat, 0.90), P99us: quantileUs(lat, 0.99)})
	}
	return rep, nil
}

// setupServePool creates the pool, its workers and cached prefixes of half the prompt spread over the
// workers, and returns 512 pre-built route bodies (a cached prefix plus a random suffix) whose
// request id is the placeholder "REQ".
func setupServePool(h *httpCaller, pool string, o ServeOptions) ([][]byte, error) {
	if err := h.must("PUT", "/v1/pools/"+pool, fmt.Appendf(nil, `{"block_size":%d,"lease_ttl_ms":60000}`, o.BlockSize)); err != nil {
		return nil, err
	}
	for w := 0; w < o.Workers; w++ {
		if err := h.must("PUT", fmt.Sprintf("/v1/workers/w%03d?pool=%s", w, pool), fmt.Appendf(nil, `{"url":"http://10.0.%d.%d:8000"}`, w/256, w%256)); err != nil {
			return nil, err
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	prefixLen := (o.PromptTokens / 2) / o.BlockSize * o.BlockSize
	prefixToks := make([][]uint32, o.Prefixes)
	for p := range prefixToks {
		toks := make([]uint32, prefixLen)
		for i := range toks {
			toks[i] = rng.Uint32N(128000)
		}
		prefixToks[p] = toks
		blocks := make([]string, prefixLen/o.BlockSize)
		for i := range blocks {
			blocks[i] = fmt.Sprintf(`{"block_hash":%d}`, uint64(p)<<20|uint64(i))
		}
		tj, _ := json.Marshal(toks)
		ev := fmt.Sprintf(`[{"worker_id":"w%03d","pool":%q,"event":{"data":{"stored":{"parent_hash":null,"token_ids":%s,"block_size":%d,"blocks":[%s]}}}}]`,
			p%o.Workers, pool, tj, o.BlockSize, strings.Join(blocks, ","))
		if err := h.must("POST", "/v1/events", []byte(ev)); err != nil {
			return nil, err
		}
	}
	bodies := make([][]byte, 512)
	for i := range bodies {
		toks := append([]uint32(nil), prefixToks[rng.IntN(len(prefixToks))]...)
		for len(toks) < o.PromptTokens {
			toks = append(toks, rng.Uint32N(128000))
		}
		if o.LocalHashes {
			hj, _ := json.Marshal(blockhash.LocalHashes(nil, toks, o.BlockSize, blockhash.LoRASeed("")))
			bodies[i] = fmt.Appendf(nil, `{"pool":%q,"request_id":"REQ","local_hashes":%s,"isl":%d}`, pool, hj, len(toks))
		} else {
			tj, _ := json.Marshal(toks)
			bodies[i] = fmt.Appendf(nil, `{"pool":%q,"request_id":"REQ","token_ids":%s}`, pool, tj)
		}
	}
	return bodies, nil
}
