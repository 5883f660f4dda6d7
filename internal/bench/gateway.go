package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// GatewayOptions configure RunGateway: the same requests, at the same fixed rate, sent once to the
// engines directly and once through the gateway; the difference is the gateway's added latency
// (SPEC §9's gateway targets).
type GatewayOptions struct {
	// Gateway is the gateway's base URL; Engines the engines' base URLs (the direct baseline, requests
	// spread round robin).
	Gateway string
	Engines []string
	// Store names the gateway's store in the report.
	Store string
	// Model is the served model name.
	Model string
	// PromptTokens per request (token-array completions prompts, drawn from Prompts distinct ones),
	// MaxTokens output tokens for non-streaming requests, StreamTokens for streaming ones.
	PromptTokens, Prompts, MaxTokens, StreamTokens int
	// Rate is the fixed request rate, requests/s, both sides together (they alternate); 0 = half of the
	// gateway's measured saturation in each mode.
	Rate float64
	// Duration of each fixed-rate run; SaturationDuration of each saturation run with
	// SaturationClients closed-loop clients.
	Duration, SaturationDuration time.Duration
	SaturationClients            int
}

// GatewayLatency is one fixed-rate run's latencies, µs.
type GatewayLatency struct {
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	// Streaming runs: time to the first chunk (P50us/P99us are to the end of the stream), and the mean
	// interval between chunks after the first, per stream (with paced engines: the engine's pace plus
	// whatever the path adds per chunk).
	TTFTP50us     float64 `json:"ttft_p50_us,omitempty"`
	TTFTP99us     float64 `json:"ttft_p99_us,omitempty"`
	PerChunkP50us float64 `json:"per_chunk_p50_us,omitempty"`
	PerChunkP99us float64 `json:"per_chunk_p99_us,omitempty"`
}

// GatewayMode compares the direct and gateway runs of one mode.
type GatewayMode struct {
	Direct  GatewayLatency `json:"direct"`
	Gateway GatewayLatency `json:"gateway"`
	// Added latency: gateway minus direct, per quantile, µs.
	AddedP50us         float64 `json:"added_p50_us"`
	AddedP99us         float64 `json:"added_p99_us"`
	AddedTTFTP50us     float64 `json:"added_ttft_p50_us,omitempty"`
	AddedTTFTP99us     float64 `json:"added_ttft_p99_us,omitempty"`
	AddedPerChunkP50us float64 `json:"added_per_chunk_p50_us,omitempty"`
	AddedPerChunkP99us float64 `json:"added_per_chunk_p99_us,omitempty"`
}

// GatewayReport is what `kvrouter bench gateway` prints.
type GatewayReport struct {
	Benchmark    string  `json:"benchmark"`
	Gateway      string  `json:"gateway"`
	Store        string  `json:"store"`
	Engines      int     `json:"engines"`
	PromptTokens int     `json:"prompt_tokens"`
	MaxTokens    int     `json:"max_tokens"`
	StreamTokens int     `json:"stream_tokens"`
	Duration     string  `json:"duration_per_run"`
	RatePerS     float64 `json:"rate_per_s"`
	// Saturation: closed-loop throughput, requests/s, through the gateway and direct, per mode; each
	// mode's fixed rate is half of its gateway saturation unless Rate is set.
	SaturationClients          int         `json:"saturation_clients"`
	SaturationGatewayRPS       float64     `json:"saturation_gateway_rps"`
	SaturationDirectRPS        float64     `json:"saturation_direct_rps"`
	SaturationStreamGatewayRPS float64     `json:"saturation_stream_gateway_rps"`
	SaturationStreamDirectRPS  float64     `json:"saturation_stream_direct_rps"`
	StreamRatePerS             float64     `json:"stream_rate_per_s"`
	NonStreaming               GatewayMode `json:"non_streaming"`
	Streaming                  GatewayMode `json:"streaming"`
}

func (o GatewayOptions) validate() error {
	switch {
	case o.Gateway == "" || len(o.Engines) == 0:
		return errors.New("a gateway URL and at least one engine URL are needed")
	case o.PromptTokens < 1 || o.Prompts < 1 || o.MaxTokens < 1 || o.StreamTokens < 2:
		return errors.New("prompt tokens, prompts and max tokens must be >= 1, stream tokens >= 2")
	case o.Rate < 0 || o.Duration <= 0 || o.SaturationDuration <= 0 || o.SaturationClients < 1:
		return errors.New("rate must be >= 0, durations and saturation clients > 0")
	}
	return nil
}

// gatewayTarget sends the benchmark's requests to one side: the gateway, or the engines round robin.
type gatewayTarget struct {
	urls []string
	next atomic.Uint64
	c    *fasthttp.Client
}

func newGatewayTarget(urls []string) *gatewayTarget {
	return &gatewayTarget{urls: urls, c: &fasthttp.Client{MaxConnsPerHost: 4096, StreamResponseBody: true,
		MaxIdleConnDuration: time.Minute}}
}

// sample is one request's timings.
type sample struct {
	total, ttft, perChunk time.Duration
	ok                    bool
}

var dataPrefix = []byte("data: ")

// do sends one completion; for a stream it times the first chunk and the chunks after it.
func (g *gatewayTarget) do(body []byte, stream bool) sample {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	u := g.urls[g.next.Add(1)%uint64(len(g.urls))]
	req.SetRequestURI(u + "/v1/completions")
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(body)
	t0 := time.Now()
	if err := g.c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		if resp.BodyStream() != nil {
			resp.CloseBodyStream()
		}
		return sample{}
	}
	rd := resp.BodyStream()
	if rd == nil {
		return sample{total: time.Since(t0), ok: true}
	}
	defer resp.CloseBodyStream()
	var s sample
	var buf [16 << 10]byte
	var first, last time.Duration
	events := 0
	for {
		n, err := rd.Read(buf[:])
		if n > 0 {
			now := time.Since(t0)
			if events == 0 {
				first = now
			}
			events += bytes.Count(buf[:n], dataPrefix)
			last = now
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return sample{}
		}
	}
	s.total, s.ok = last, true
	if stream {
		s.ttft = first
		if events > 1 {
			s.perChunk = (last - first) / time.Duration(events-1)
		}
	}
	if !stream {
		s.total = time.Since(t0)
	}
	return s
}

// gatewayBodies builds the request bodies: token-array prompts, so both sides do the same work.
func gatewayBodies(o GatewayOptions, stream bool) [][]byte {
	rng := rand.New(rand.NewPCG(7, 11))
	out := make([][]byte, o.Prompts)
	for i := range out {
		var b strings.Builder
		b.WriteString(`{"model":` + strconv.Quote(o.Model) + `,"prompt":[`)
		for t := 0; t < o.PromptTokens; t++ {
			if t > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(int(rng.Uint32N(50000)) + 100))
		}
		if stream {
			fmt.Fprintf(&b, `],"max_tokens":%d,"stream":true}`, o.StreamTokens)
		} else {
			fmt.Fprintf(&b, `],"max_tokens":%d}`, o.MaxTokens)
		}
		out[i] = []byte(b.String())
	}
	return out
}

// fixedRate sends requests at rate per second for d (open loop: request i starts on schedule whether or
// not earlier ones answered), alternating between the direct and the gateway side, so both sides see the
// same moments of a shared, noisy machine; each side gets rate/2. It returns each side's samples.
func fixedRate(ctx context.Context, direct, gw *gatewayTarget, bodies [][]byte, stream bool, rate float64, d time.Duration) (ds, gs []sample) {
	interval := time.Duration(float64(time.Second) / rate)
	n := int(d/interval) / 2 * 2
	all := make([]sample, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
			time.Sleep(w)
		}
		t := direct
		if i%2 == 1 {
			t = gw
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			all[i] = t.do(bodies[(i/2)%len(bodies)], stream) // pair i/2: the same body on both sides
		}(i)
	}
	wg.Wait()
	for i := 0; i+1 < n; i += 2 {
		ds, gs = append(ds, all[i]), append(gs, all[i+1])
	}
	return ds, gs
}

// closedLoop runs clients back-to-back requests for d and returns answered requests/s.
func closedLoop(ctx context.Context, t *gatewayTarget, bodies [][]byte, stream bool, clients int, d time.Duration) float64 {
	var okCount atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := c; time.Now().Before(deadline) && ctx.Err() == nil; i += clients {
				if t.do(bodies[i%len(bodies)], stream).ok {
					okCount.Add(1)
				}
			}
		}(c)
	}
	wg.Wait()
	return float64(okCount.Load()) / time.Since(start).Seconds()
}

func summarize(s []sample) GatewayLatency {
	var total, ttft, chunk []time.Duration
	errs := 0
	for _, x := range s {
		if !x.ok {
			errs++
			continue
		}
		total = append(total, x.total)
		if x.ttft > 0 {
			ttft = append(ttft, x.ttft)
		}
		if x.perChunk > 0 {
			chunk = append(chunk, x.perChunk)
		}
	}
	sortDurations(total)
	sortDurations(ttft)
	sortDurations(chunk)
	return GatewayLatency{Requests: len(s), Errors: errs, P50us: quantileUs(total, 0.5), P99us: quantileUs(total, 0.99),
		TTFTP50us: quantileUs(ttft, 0.5), TTFTP99us: quantileUs(ttft, 0.99),
		PerChunkP50us: quantileUs(chunk, 0.5), PerChunkP99us: quantileUs(chunk, 0.99)}
}

func compare(direct, gw GatewayLatency) GatewayMode {
	m := GatewayMode{Direct: direct, Gateway: gw, AddedP50us: gw.P50us - direct.P50us, AddedP99us: gw.P99us - direct.P99us}
	if gw.TTFTP50us > 0 {
		m.AddedTTFTP50us, m.AddedTTFTP99us = gw.TTFTP50us-direct.TTFTP50us, gw.TTFTP99us-direct.TTFTP99us
		m.AddedPerChunkP50us, m.AddedPerChunkP99us = gw.PerChunkP50us-direct.PerChunkP50us, gw.PerChunkP99us-direct.PerChunkP99us
	}
	return m
}

// RunGateway measures the gateway's saturation, then its added latency at a fixed rate, for
// non-streaming and streaming completions; in each mode's fixed-rate run the direct and gateway requests
// alternate.
func RunGateway(ctx context.Context, o GatewayOptions) (GatewayReport, error) {
	rep := GatewayReport{Benchmark: "gateway", Gateway: o.Gateway, Store: o.Store, Engines: len(o.Engines),
		PromptTokens: o.PromptTokens, MaxTokens: o.MaxTokens, StreamTokens: o.StreamTokens, Duration: o.Duration.String(),
		SaturationClients: o.SaturationClients}
	if err := o.validate(); err != nil {
		return rep, err
	}
	gw, direct := newGatewayTarget([]string{o.Gateway}), newGatewayTarget(o.Engines)
	plain, streamed := gatewayBodies(o, false), gatewayBodies(o, true)
	for _, t := range []*gatewayTarget{direct, gw} { // warm-up: connections, caches, the engines' prefixes
		if s := t.do(plain[0], false); !s.ok {
			return rep, fmt.Errorf("warm-up request to %v failed", t.urls)
		}
		closedLoop(ctx, t, plain, false, 8, o.SaturationDuration/4)
	}
	rep.SaturationDirectRPS = closedLoop(ctx, direct, plain, false, o.SaturationClients, o.SaturationDuration)
	rep.SaturationGatewayRPS = closedLoop(ctx, gw, plain, false, o.SaturationClients, o.SaturationDuration)
	rep.SaturationStreamDirectRPS = closedLoop(ctx, direct, streamed, true, o.SaturationClients, o.SaturationDuration)
	rep.SaturationStreamGatewayRPS = closedLoop(ctx, gw, streamed, true, o.SaturationClients, o.SaturationDuration)
	rate, streamRate := o.Rate, o.Rate
	if rate == 0 {
		rate, streamRate = rep.SaturationGatewayRPS/2, rep.SaturationStreamGatewayRPS/2
	}
	if rate <= 0 || streamRate <= 0 {
		return rep, errors.New("the gateway answered nothing during the saturation runs")
	}
	rep.RatePerS, rep.StreamRatePerS = rate, streamRate
	ds, gs := fixedRate(ctx, direct, gw, plain, false, rate, o.Duration)
	rep.NonStreaming = compare(summarize(ds), summarize(gs))
	ds, gs = fixedRate(ctx, direct, gw, streamed, true, streamRate, o.Duration)
	rep.Streaming = compare(summarize(ds), summarize(gs))
	return rep, ctx.Err()
}
