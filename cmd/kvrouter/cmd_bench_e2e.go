package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

func init() {
	benchCommands["e2e"] = command{name: "e2e", summary: "end-to-end load: route → mock engine → done, KV routing vs round-robin (hit rate, TTFT)", run: runBenchE2E}
}

// e2eResult is one policy's measurements.
type e2eResult struct {
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

func runBenchE2E(ctx context.Context, args []string) error {
	fs := newFlagSet("bench e2e", "bench e2e --router http://host:port --workers w1=http://…,w2=http://… [flags]")
	router := fs.String("router", "", "kvrouter serve base URL (for the kv policy)")
	workersFlag := fs.String("workers", "", "the engines: comma-separated NAME=URL (names as registered in the router)")
	policies := fs.String("policies", "kv,round-robin", "policies to run, in order (kv, round-robin); mocks are restarted before each one but the first")
	requests := fs.Int("requests", 400, "requests per policy")
	conc := fs.Int("concurrency", 8, "requests in flight (closed loop)")
	groups := fs.Int("groups", 32, "distinct shared prefixes")
	prefix := fs.Int("prefix-tokens", 2048, "tokens of each shared prefix")
	suffix := fs.Int("suffix-tokens", 64, "unique tokens after the prefix")
	maxTokens := fs.Int("max-tokens", 8, "output tokens per request")
	seed := fs.Uint64("seed", 1, "workload seed (the same sequence for every policy)")
	restart := fs.Bool("restart", true, "restart every mock engine (POST /admin/restart) before each policy but the first")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	type worker struct{ name, url string }
	var workers []worker
	for _, w := range strings.Split(*workersFlag, ",") {
		n, u, ok := strings.Cut(strings.TrimSpace(w), "=")
		if !ok || n == "" || u == "" {
			return fmt.Errorf("--workers: %q: want NAME=URL", w)
		}
		workers = append(workers, worker{n, strings.TrimRight(u, "/")})
	}
	if *requests < 1 || *conc < 1 || *groups < 1 || *prefix < 0 || *suffix < 1 || *maxTokens < 1 {
		return fmt.Errorf("--requests, --concurrency, --groups, --suffix-tokens, --max-tokens must be >= 1")
	}
	urlOf := map[string]string{}
	for _, w := range workers {
		urlOf[w.name] = w.url
	}
	// The workload: request i uses prefix group g[i] (Zipf-free uniform draw) and its own suffix.
	rng := rand.New(rand.NewPCG(*seed, 0xe2e))
	groupOf := make([]int, *requests)
	for i := range groupOf {
		groupOf[i] = rng.IntN(*groups)
	}
	prompt := func(i int) []uint32 {
		p := make([]uint32, 0, *prefix+*suffix)
		for j := 0; j < *prefix; j++ {
			p = append(p, uint32(1_000_000+groupOf[i]*(*prefix)+j))
		}
		for j := 0; j < *suffix; j++ {
			p = append(p, uint32(50_000_000+i*(*suffix)+j))
		}
		return p
	}
	client := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4 * *conc}}
	post := func(ctx context.Context, url string, body any) (*http.Response, error) {
		b, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return client.Do(req)
	}

	var results []e2eResult
	for pi, policy := range strings.Split(*policies, ",") {
		policy = strings.TrimSpace(policy)
		if policy != "kv" && policy != "round-robin" {
			return fmt.Errorf("--policies: unknown policy %q", policy)
		}
		if policy == "kv" && *router == "" {
			return fmt.Errorf("--router is required for the kv policy")
		}
		if pi > 0 && *restart {
			for _, w := range workers {
				resp, err := post(ctx, w.url+"/admin/restart", nil)
				if err != nil {
					return fmt.Errorf("restart %s: %w", w.name, err)
				}
				resp.Body.Close()
			}
		}
		res := e2eResult{Policy: policy, Requests: *requests, PerWorker: map[string]int{}}
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
				resp, err := post(ctx, *router+"/v1/route", map[string]any{"request_id": reqID, "token_ids": p})
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
			} else {
				w := workers[i%len(workers)]
				name, url = w.name, w.url
			}
			t0 := time.Now()
			resp, err := post(ctx, url+"/v1/completions", map[string]any{"prompt": p, "max_tokens": *maxTokens,
				"stream": true, "stream_options": map[string]any{"include_usage": true}})
			if err != nil {
				return err
			}
			defer resp.Body.Close()
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
						if r, err := post(ctx, *router+"/v1/requests/"+reqID+"/prefill_done", nil); err == nil {
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
				if r, err := post(ctx, *router+"/v1/requests/"+reqID+"/done", nil); err == nil {
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
		for k := 0; k < *conc; k++ {
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
		for i := 0; i < *requests && ctx.Err() == nil; i++ {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		res.WallSeconds = time.Since(start).Seconds()
		res.RequestsPerS = float64(*requests) / res.WallSeconds
		if res.PromptTokens > 0 {
			res.HitRate = float64(res.CachedTokens) / float64(res.PromptTokens)
		}
		slices.Sort(ttfts)
		slices.Sort(routes)
		res.TTFTP50Ms, res.TTFTP90Ms, res.TTFTP99Ms = pct(ttfts, 0.5), pct(ttfts, 0.9), pct(ttfts, 0.99)
		res.RouteP50Ms = pct(routes, 0.5)
		for _, v := range ttfts {
			res.TTFTMeanMs += v / float64(len(ttfts))
		}
		results = append(results, res)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"benchmark": "e2e", "requests": *requests, "concurrency": *conc,
		"groups": *groups, "prefix_tokens": *prefix, "suffix_tokens": *suffix, "max_tokens": *maxTokens,
		"workers": len(workers), "results": results})
}

// pct is the q-quantile of sorted values (nearest rank), 0 when empty.
func pct(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
