package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Engine is one inference engine of an end-to-end run: its name as registered in the router and its
// OpenAI-compatible base URL.
type Engine struct {
	Name, URL string
}

// E2EOptions configure RunE2E.
type E2EOptions struct {
	// Router is the `kvrouter serve` base URL (required by the kv and gateway policies).
	Router string
	// Model is the "model" of gateway requests (a model the pool lists in its models knob).
	Model string
	// Workers are the engines (mock engines: POST /admin/restart empties their cache).
	Workers []Engine
	// Policies run in order: "kv" (the client asks POST /v1/route, calls the engine, then prefill_done and
	// done), "gateway" (the client calls the router's OpenAI endpoint, which routes, forwards and releases
	// by itself: TTFT includes the routing) or "round-robin" (straight to the engines, in turn).
	Policies []string
	// Requests per policy, Concurrency in flight (closed loop), over Groups shared prefixes of
	// PrefixTokens each, plus SuffixTokens unique tokens; MaxTokens output tokens each.
	Requests, Concurrency, Groups, PrefixTokens, SuffixTokens, MaxTokens int
	// Seed draws the workload (the same sequence for every policy).
	Seed uint64
	// Restart restarts every engine before each policy but the first.
	Restart bool
}

// E2EReport is what `kvrouter bench e2e` prints.
type E2EReport struct {
	Benchmark    string      `json:"benchmark"`
	Requests     int         `json:"requests"`
	Concurrency  int         `json:"concurrency"`
	Groups       int         `json:"groups"`
	PrefixTokens int         `json:"prefix_tokens"`
	SuffixTokens int         `json:"suffix_tokens"`
	MaxTokens    int         `json:"max_tokens"`
	Workers      int         `json:"workers"`
	Results      []E2EResult `json:"results"`
}

// E2EResult is one policy's measurements.
type E2EResult struct {
	Policy        string         `json:"policy"`
	Requests      int            `json:"requests"`
	Errors        int            `json:"errors"`
	PromptTokens  int64          `json:"prompt_tokens"`
	CachedTokens  int64          `json:"cached_tokens"`
	HitRate       float64        `json:"hit_rate"` // cached / prompt tokens, as the engines reported them
	TTFTMeanMs    float64        `json:"ttft_mean_ms"`
	TTFTP50Ms     float64        `json:"ttft_p50_ms"`
	TTFTP90Ms     float64        `json:"ttft_p90_ms"`
	TTFTP99Ms     float64        `json:"ttft_p99_ms"`
	RouteP50Ms    float64        `json:"route_p50_ms,omitempty"`
	WallSeconds   float64        `json:"wall_seconds"`
	RequestsPerS  float64        `json:"requests_per_s"`
	PerWorker     map[string]int `json:"per_worker"`
	FirstErrorMsg string         `json:"first_error,omitempty"`
}

// RunE2E sends the same workload through each policy: route (kv: POST /v1/route, then prefill_done at the
// first streamed chunk and done at the end), stream a completion from the chosen engine, and measure
// the engines' reported cache hits and the time to first token.
func RunE2E(ctx context.Context, o E2EOptions) (E2EReport, error) {
	rep := E2EReport{Benchmark: "e2e", Requests: o.Requests, Concurrency: o.Concurrency, Groups: o.Groups,
		PrefixTokens: o.PrefixTokens, SuffixTokens: o.SuffixTokens, MaxTokens: o.MaxTokens, Workers: len(o.Workers)}
	if o.Requests < 1 || o.Concurrency < 1 || o.Groups < 1 || o.PrefixTokens < 0 || o.SuffixTokens < 1 || o.MaxTokens < 1 || len(o.Workers) == 0 {
		return rep, fmt.Errorf("requests, concurrency, groups, suffix tokens, max tokens and workers must be >= 1")
	}
	urlOf := map[string]string{}
	for _, w := range o.Workers {
		urlOf[w.Name] = w.URL
	}
	// The workload: request i uses prefix group g[i] (Zipf-free uniform draw) and its own suffix.
	rng := rand.New(rand.NewPCG(o.Seed, 0xe2e))
	groupOf := make([]int, o.Requests)
	for i := range groupOf {
		groupOf[i] = rng.IntN(o.Groups)
	}
	prompt := func(i int) []uint32 {
		p := make([]uint32, 0, o.PrefixTokens+o.SuffixTokens)
		for j := 0; j < o.PrefixTokens; j++ {
			p = append(p, uint32(1_000_000+groupOf[i]*(o.PrefixTokens)+j))
		}
		for j := 0; j < o.SuffixTokens; j++ {
			p = append(p, uint32(50_000_000+i*(o.SuffixTokens)+j))
		}
		return p
	}
	client := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4 * o.Concurrency}}
	post := func(ctx context.Context, url string, body any) (*http.Response, error) {
		b, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return client.Do(req)
	}

	for pi, policy := range o.Policies {
		policy = strings.TrimSpace(policy)
		if policy != "kv" && policy != "gateway" && policy != "round-robin" {
			return rep, fmt.Errorf("unknown policy %q (kv, gateway, round-robin)", policy)
		}
		if (policy == "kv" || policy == "gateway") && o.Router == "" {
			return rep, fmt.Errorf("the %s policy needs the router URL", policy)
		}
		if policy == "gateway" && o.Model == "" {
			return rep, fmt.Errorf("the gateway policy needs the model name (a model of the pool's models knob)")
		}
		if pi > 0 && o.Restart {
			for _, w := range o.Workers {
				resp, err := post(ctx, w.URL+"/admin/restart", nil)
				if err != nil {
					return rep, fmt.Errorf("restart %s: %w", w.Name, err)
				}
				resp.Body.Close()
			}
		}
		res := E2EResult{Policy: policy, Requests: o.Requests, PerWorker: map[string]int{}}
		var mu sync.Mutex
		var ttfts, routes []float64
		jobs := make(chan int)
		var wg sync.WaitGroup
		start := time.Now()
		one := func(i int) error {
			p := prompt(i)
			var name, url, reqID string
			if policy == "kv" {
				reqID = fmt.Sprintf("e2e-%d-%d-%d", time.Now().UnixNano(), pi, i)
				t0 := time.Now()
				resp, err := post(ctx, o.Router+"/v1/route", map[string]any{"request_id": reqID, "token_ids": p})
				if err != nil {
					return err
				}
				var d struct {
					WorkerID string `json:"worker_id"`
					URL      string `json:"url"`
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || json.Unmarshal(b, &d) != nil {
					return fmt.Errorf("route: %d %s", resp.StatusCode, b)
				}
				mu.Lock()
				routes = append(routes, float64(time.Since(t0).Microseconds())/1000)
				mu.Unlock()
				name, url = d.WorkerID, strings.TrimRight(d.URL, "/")
				if url == "" {
					url = urlOf[name]
				}
			} else if policy == "gateway" {
				url = strings.TrimRight(o.Router, "/")
			} else {
				w := o.Workers[i%len(o.Workers)]
				name, url = w.Name, w.URL
			}
			t0 := time.Now()
			body := map[string]any{"prompt": p, "max_tokens": o.MaxTokens,
				"stream": true, "stream_options": map[string]any{"include_usage": true}}
			if policy == "gateway" {
				body["model"] = o.Model
			}
			resp, err := post(ctx, url+"/v1/completions", body)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if policy == "gateway" {
				name = resp.Header.Get("x-kvrouter-worker")
			}
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				return fmt.Errorf("%s: completion: %d %s", name, resp.StatusCode, b)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
			var ttft float64 = -1
			var cached, promptToks int64
			for sc.Scan() {
				line := sc.Text()
				if !strings.HasPrefix(line, "data: ") {
					continue
				}
				if ttft < 0 {
					ttft = float64(time.Since(t0).Microseconds()) / 1000
					if policy == "kv" { // the prefill is over: release its booked prefill load
						if r, err := post(ctx, o.Router+"/v1/requests/"+reqID+"/prefill_done", nil); err == nil {
							r.Body.Close()
						}
					}
				}
				var c struct {
					Usage *struct {
						PromptTokens int64 `json:"prompt_tokens"`
						Details      struct {
							CachedTokens int64 `json:"cached_tokens"`
						} `json:"prompt_tokens_details"`
					} `json:"usage"`
				}
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &c) == nil && c.Usage != nil {
					cached, promptToks = c.Usage.Details.CachedTokens, c.Usage.PromptTokens
				}
			}
			if err := sc.Err(); err != nil {
				return err
			}
			if policy == "kv" {
				if r, err := post(ctx, o.Router+"/v1/requests/"+reqID+"/done", nil); err == nil {
					r.Body.Close()
				}
			}
			mu.Lock()
			ttfts = append(ttfts, ttft)
			res.CachedTokens += cached
			res.PromptTokens += promptToks
			res.PerWorker[name]++
			mu.Unlock()
			return nil
		}
		for k := 0; k < o.Concurrency; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range jobs {
					if err := one(i); err != nil {
						mu.Lock()
						res.Errors++
						if res.FirstErrorMsg == "" {
							res.FirstErrorMsg = err.Error()
						}
						mu.Unlock()
					}
				}
			}()
		}
		for i := 0; i < o.Requests && ctx.Err() == nil; i++ {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		res.WallSeconds = time.Since(start).Seconds()
		res.RequestsPerS = float64(o.Requests) / res.WallSeconds
		if res.PromptTokens > 0 {
			res.HitRate = float64(res.CachedTokens) / float64(res.PromptTokens)
		}
		slices.Sort(ttfts)
		slices.Sort(routes)
		res.TTFTP50Ms, res.TTFTP90Ms, res.TTFTP99Ms = nearestRank(ttfts, 0.5), nearestRank(ttfts, 0.9), nearestRank(ttfts, 0.99)
		res.RouteP50Ms = nearestRank(routes, 0.5)
		for _, v := range ttfts {
			res.TTFTMeanMs += v / float64(len(ttfts))
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}
