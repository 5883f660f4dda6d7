package mock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/ingest/vllmwire"
	"github.com/kvrouter/kvrouter/ingest/zmqpub"
	"github.com/kvrouter/kvrouter/simulation/engine"
)

// Config configures one simulated engine.
type Config struct {
	// Name identifies the engine in logs and /v1/models' owner; default "mock".
	Name string
	// Model is the served model name; default "mock-model".
	Model string
	// Engine is the scheduler and block pool model (block size, capacity, cost model).
	Engine engine.Options
	// Speedup runs virtual time this many times faster than the wall clock; default 1.
	Speedup float64
	// HTTPAddr is the HTTP listen address; default "127.0.0.1:0".
	HTTPAddr string
	// ZMQEndpoint is the KV event PUB socket; default "tcp://127.0.0.1:0". ReplayEndpoint is the
	// ROUTER replay socket; default "tcp://127.0.0.1:0"; "none" disables it.
	ZMQEndpoint    string
	ReplayEndpoint string
	// ReplayBuffer is the replay buffer size in messages; default 10000 (vLLM's buffer_steps).
	ReplayBuffer int
	// DPRank is published in every batch; default 0.
	DPRank int
	// ITLMs is the least interval between two streamed tokens of a request, virtual ms (so divided by
	// Speedup on the wall clock); 0 (default) streams each token when the engine model samples it: at the
	// end of the scheduler step that decodes it, ~6 ms per token at batch 1 with the default cost model,
	// more in a busy batch. A larger ITL only delays the answer: the engine still computes at its own
	// pace and releases the request's KV blocks when it has sampled the last token.
	ITLMs float64
	// ImageTokens enables multimodal chat (`kvrouter mock --multimodal`): each image content part
	// expands to ImageStartToken, ImageTokens × ImageTokenID, ImageEndToken; the blocks its run covers
	// fold its identity (the part's uuid, else blockhash.MMIdentifier of its URL) and BlockStored
	// publishes it in extra_keys as vLLM 0.19+ does. Default 0: image parts are ignored (text only).
	ImageTokens int
	// DefaultMaxTokens is the output length when a request gives no max_tokens; default 16.
	DefaultMaxTokens int
	// MaxTokensLimit caps max_tokens (400 above); default 8192.
	MaxTokensLimit int
	// Faults are the initial fault switches.
	Faults Faults
	// Seed seeds the fault injection's random numbers; default 1.
	Seed   uint64
	Logger *slog.Logger
}

// Faults are the fault switches. Counters ("next N") are consumed as they fire.
type Faults struct {
	// DropEvents drops the next N event messages: they take a sequence number and stay in the replay
	// buffer but are never sent (a gap for subscribers).
	DropEvents int `json:"drop_events"`
	// DropProb drops each event message with this probability.
	DropProb float64 `json:"drop_prob"`
	// DuplicateEvents publishes the next N event messages twice (the second copy as a new message).
	DuplicateEvents int `json:"duplicate_events"`
	// DelayEventsMs holds every event message this long before publishing it (order is kept).
	DelayEventsMs float64 `json:"delay_events_ms"`
	// ErrorNext answers the next N completion requests with ErrorStatus.
	ErrorNext int `json:"error_next"`
	// ErrorProb answers each completion request with ErrorStatus with this probability.
	ErrorProb float64 `json:"error_prob"`
	// ErrorStatus is the HTTP status of injected errors; default 503.
	ErrorStatus int `json:"error_status"`
	// SlowMs delays every completion response by this long before any work.
	SlowMs float64 `json:"slow_ms"`
	// FailMidStreamNext cuts the next N streamed completions, and FailMidStreamAfter > 0 every streamed
	// completion while it is set. The cut comes after FailMidStreamAfter token chunks (1 when it is 0;
	// after all of them when the answer is shorter, before the usage chunk and "data: [DONE]"). It is
	// what a crashed vLLM does to its clients: the TCP connection closes in the middle of the chunked
	// body, with no SSE error event and no terminating chunk (clients read an unexpected EOF). The engine
	// drops the request. Non-streamed completions are not affected.
	FailMidStreamNext  int `json:"fail_mid_stream_next"`
	FailMidStreamAfter int `json:"fail_mid_stream_after"`
}

// check reports the first invalid switch.
func (f Faults) check() error {
	switch {
	case f.DropProb < 0 || f.DropProb > 1 || f.ErrorProb < 0 || f.ErrorProb > 1:
		return errors.New("drop_prob and error_prob must be in [0, 1]")
	case f.DropEvents < 0 || f.DuplicateEvents < 0 || f.ErrorNext < 0 || f.FailMidStreamNext < 0 || f.FailMidStreamAfter < 0:
		return errors.New("counts must be >= 0")
	case f.DelayEventsMs < 0 || f.SlowMs < 0:
		return errors.New("delays must be >= 0")
	case f.ErrorStatus != 0 && (f.ErrorStatus < 400 || f.ErrorStatus > 599):
		return fmt.Errorf("error_status %d must be 4xx or 5xx", f.ErrorStatus)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Name == "" {
		c.Name = "mock"
	}
	if c.Model == "" {
		c.Model = "mock-model"
	}
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:0"
	}
	if c.ZMQEndpoint == "" {
		c.ZMQEndpoint = "tcp://127.0.0.1:0"
	}
	if c.ReplayEndpoint == "" {
		c.ReplayEndpoint = "tcp://127.0.0.1:0"
	}
	if c.ReplayEndpoint == "none" {
		c.ReplayEndpoint = ""
	}
	if c.ReplayBuffer == 0 {
		c.ReplayBuffer = 10000
	}
	if c.DefaultMaxTokens == 0 {
		c.DefaultMaxTokens = 16
	}
	if c.MaxTokensLimit == 0 {
		c.MaxTokensLimit = 8192
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Engine = c.Engine.WithDefaults()
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	c.setDefaults()
	switch {
	case c.Speedup <= 0 || c.Speedup != c.Speedup:
		return fmt.Errorf("mock: speedup %v must be > 0", c.Speedup)
	case c.DPRank < 0:
		return fmt.Errorf("mock: dp rank %d must be >= 0", c.DPRank)
	case c.DefaultMaxTokens < 1 || c.MaxTokensLimit < 1:
		return errors.New("mock: max tokens must be >= 1")
	case c.ImageTokens < 0:
		return fmt.Errorf("mock: image tokens %d must be >= 0", c.ImageTokens)
	case c.ReplayBuffer < 0:
		return errors.New("mock: replay buffer must be >= 0")
	case c.ITLMs < 0 || math.IsInf(c.ITLMs, 0) || c.ITLMs != c.ITLMs:
		return fmt.Errorf("mock: itl %v ms must be finite and >= 0", c.ITLMs)
	}
	if err := c.Faults.check(); err != nil {
		return fmt.Errorf("mock: faults: %w", err)
	}
	if err := c.Engine.Validate(); err != nil {
		return fmt.Errorf("mock: %w", err)
	}
	return nil
}

// errRestarted fails the requests in flight when the engine restarts; errAborted a request whose client
// went away (or whose stream a fault cut).
var (
	errRestarted = errors.New("engine restarted")
	errAborted   = errors.New("request aborted")
)

// request is one request in flight.
type request struct {
	id       uint64
	tokens   []uint32
	blocks   []uint64 // engine hashes of the prompt's full blocks (blockTok keys)
	output   int
	cached   int // prefix cache hit at first admission, tokens
	admitted bool
	// generated counts the output tokens delivered so far (at the end of the steps that sampled them);
	// firstAt is the wall-clock time of the first one. Both guarded by Engine.mu.
	generated int
	firstAt   time.Time
	sampled   int           // the engine's count at the last step (loop side, e.mu held)
	progress  chan struct{} // capacity 1: a token was delivered since the last receive
	first     chan struct{} // closed at the first token (or on failure)
	done      chan struct{} // closed when finished (or on failure)
	err       error         // set before first/done are closed on failure
}

// Engine is one simulated engine: the model, its clock, its event publisher and its faults.
type Engine struct {
	cfg Config
	log *slog.Logger
	t0  time.Time

	mu       sync.Mutex
	eng      *engine.Engine
	gen      uint64 // bumped by Restart; results of an older generation are discarded
	nextID   uint64
	reqs     map[uint64]*request
	blockTok map[uint64]*tokRef // engine hash → tokens and extra keys of a block of a request in flight
	inStep   bool               // a step's results are pending delivery
	faults   Faults
	rng      *rand.Rand
	wake     chan struct{}

	sendMu    sync.Mutex // orders a step's check of the generation with its enqueueing (vs Restart)
	pubq      chan pubItem
	pubMu     sync.Mutex // guards pub
	pub       *zmqpub.Publisher
	pubAddr   string
	replay    string
	queued    atomic.Int64 // messages enqueued and not yet published
	published atomic.Uint64
	dropped   atomic.Uint64
	restarts  atomic.Uint64

	// metrics counters
	promptTokens, genTokens, cacheQueries, cacheHits, success atomic.Uint64
}

type tokRef struct {
	tokens []uint32
	extra  []vllmwire.ExtraKey // the block's multimodal extra keys (nil: none)
	refs   int
}

// pubItem is one message to publish, or a restart of the publisher (done closed when complete).
type pubItem struct {
	payload []byte
	restart chan error
}

// NewEngine validates cfg and returns an engine; Start runs it.
func NewEngine(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	eng, err := engine.New(cfg.Engine)
	if err != nil {
		return nil, err
	}
	return &Engine{
		cfg: cfg, log: cfg.Logger.With("engine", cfg.Name), eng: eng,
		reqs: map[uint64]*request{}, blockTok: map[uint64]*tokRef{},
		faults: cfg.Faults, rng: rand.New(rand.NewPCG(cfg.Seed, 0x6d6f636b)),
		wake: make(chan struct{}, 1), pubq: make(chan pubItem, 1024),
	}, nil
}

// vnow is the virtual time, ms.
func (e *Engine) vnow() float64 {
	return float64(time.Since(e.t0).Nanoseconds()) / 1e6 * e.cfg.Speedup
}

// sleepUntil sleeps until virtual time t (ms) or ctx is done / the engine is woken early (wake).
func (e *Engine) sleepUntil(ctx context.Context, t float64, wake <-chan struct{}) bool {
	d := time.Duration((t - e.vnow()) / e.cfg.Speedup * float64(time.Millisecond))
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	case <-wake:
		return true
	}
}

// startPublisher binds the publisher (on the resolved addresses after the first start).
func (e *Engine) startPublisher(ctx context.Context, pubEP, replayEP string) error {
	p, err := zmqpub.New(zmqpub.Options{Endpoint: pubEP, ReplayEndpoint: replayEP,
		BufferSteps: e.cfg.ReplayBuffer, Logger: e.log})
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	e.pubMu.Lock()
	e.pub, e.pubAddr, e.replay = p, p.Addr(), p.ReplayAddr()
	e.pubMu.Unlock()
	return nil
}

// Start binds the event publisher and runs the scheduler and publishing loops until ctx is done.
func (e *Engine) Start(ctx context.Context) error {
	e.t0 = time.Now()
	if err := e.startPublisher(ctx, e.cfg.ZMQEndpoint, e.cfg.ReplayEndpoint); err != nil {
		return fmt.Errorf("mock %s: %w", e.cfg.Name, err)
	}
	go e.loop(ctx)
	go e.publishLoop(ctx)
	return nil
}

// EventsAddr and ReplayAddr are the dialable ZMQ endpoints ("" replay: disabled).
func (e *Engine) EventsAddr() string {
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	return e.pubAddr
}

func (e *Engine) ReplayAddr() string {
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	return e.replay
}

// Close closes the publisher.
func (e *Engine) Close() error {
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	if e.pub == nil {
		return nil
	}
	return e.pub.Close()
}

// submit queues a request; the returned request's channels report its progress. Blocks that overlap
// an image fold its identity into their hash (so different images are different blocks) and carry
// its [identifier, offset] extra key.
func (e *Engine) submit(tokens []uint32, items []mmItem, maxTokens int) (*request, error) {
	bs := e.cfg.Engine.BlockSize
	var hashed []blockhash.MMItem
	for _, it := range items {
		hashed = append(hashed, blockhash.MMItem{Hash: blockhash.MMIdentifierHash(it.identifier), Offset: it.offset, Length: it.length})
	}
	locals := blockhash.LocalHashesMM(nil, tokens, bs, blockhash.Seed, hashed)
	seqs := blockhash.Sequence(nil, locals)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextID++
	r := &request{id: e.nextID, tokens: tokens, output: maxTokens,
		progress: make(chan struct{}, 1), first: make(chan struct{}), done: make(chan struct{})}
	err := e.eng.Submit(engine.Request{ID: r.id, InputTokens: len(tokens), OutputTokens: maxTokens,
		SeqHashes: seqs, LocalHashes: locals}, e.vnow())
	if err != nil {
		return nil, err
	}
	e.reqs[r.id] = r
	// Keyed by engine hash (one per prefix position), not by local hash: two blocks of identical tokens
	// and image (the middle of a long image) still carry their own offsets.
	r.blocks = make([]uint64, len(seqs))
	for i, sq := range seqs {
		h := e.eng.Pool().EngineHash(sq)
		r.blocks[i] = h
		if t := e.blockTok[h]; t != nil {
			t.refs++
		} else {
			e.blockTok[h] = &tokRef{tokens: tokens[i*bs : (i+1)*bs], extra: blockExtraKeys(items, i*bs, bs), refs: 1}
		}
	}
	e.promptTokens.Add(uint64(len(tokens)))
	notify(e.wake)
	return r, nil
}

// blockExtraKeys are the extra keys vLLM 0.19+ publishes for the block starting at token start: one
// (identifier, offset in the block) pair per image overlapping it; nil when none does.
func blockExtraKeys(items []mmItem, start, bs int) []vllmwire.ExtraKey {
	var keys []vllmwire.ExtraKey
	for _, it := range items {
		if it.offset < start+bs && it.offset+it.length > start {
			keys = append(keys, vllmwire.ExtraKey{Identifier: it.identifier, Pair: true, Offset: int64(it.offset - start)})
		}
	}
	return keys
}

// abort drops a request the client no longer waits for (vLLM aborts it on disconnect): the engine
// frees its blocks and waiting callers see errAborted. A finished request is left alone.
func (e *Engine) abort(r *request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.reqs[r.id] != r {
		return
	}
	e.eng.Abort(r.id)
	delete(e.reqs, r.id)
	e.releaseTokens(r)
	r.err = errAborted
	closeOnce(r.first)
	closeOnce(r.done)
}

// progressOf reports the tokens delivered for r, the time of its first and its failure.
func (e *Engine) progressOf(r *request) (generated int, firstAt time.Time, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return r.generated, r.firstAt, r.err
}

// releaseTokens drops a finished request's block tokens. e.mu held.
func (e *Engine) releaseTokens(r *request) {
	for _, h := range r.blocks {
		if t := e.blockTok[h]; t != nil {
			if t.refs--; t.refs == 0 {
				delete(e.blockTok, h)
			}
		}
	}
}

// delivery is what a step produces, delivered at the step's end.
type delivery struct {
	gen      uint64
	endMs    float64
	firsts   []*request
	sampled  []sampledTokens
	finished []*request
	payload  []byte
}

// sampledTokens is a request's count of sampled tokens at the end of a step.
type sampledTokens struct {
	r *request
	n int
}

// loop runs scheduler steps in wall-clock time.
func (e *Engine) loop(ctx context.Context) {
	for ctx.Err() == nil {
		e.mu.Lock()
		next, ok := e.eng.NextEventTime()
		if !ok {
			e.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-e.wake:
			}
			continue
		}
		if now := e.vnow(); next > now {
			e.mu.Unlock()
			if !e.sleepUntil(ctx, next, nil) {
				return
			}
			continue
		}
		d := e.step()
		e.mu.Unlock()
		if !e.sleepUntil(ctx, d.endMs, nil) {
			return
		}
		e.deliver(ctx, d)
	}
}

// step runs one scheduler step and collects its results. e.mu held.
func (e *Engine) step() delivery {
	res := e.eng.Step(e.vnow())
	d := delivery{gen: e.gen, endMs: res.EndMs}
	for _, a := range res.Admitted {
		if r := e.reqs[a.ID]; r != nil && !r.admitted {
			r.admitted, r.cached = true, a.CachedTokens
			e.cacheQueries.Add(uint64(len(r.tokens)))
			e.cacheHits.Add(uint64(a.CachedTokens))
		}
	}
	if len(res.Events) > 0 {
		d.payload = e.encode(res.Events)
	}
	for _, f := range res.FirstTokens {
		if r := e.reqs[f.ID]; r != nil {
			d.firsts = append(d.firsts, r)
		}
	}
	// The engine reports first and last tokens; the decodes in between are read per request (a few
	// hundred map lookups per step at most: MaxNumSeqs bounds the running requests).
	for id, r := range e.reqs {
		if n, ok := e.eng.Generated(id); ok && n > r.sampled {
			r.sampled = n
			d.sampled = append(d.sampled, sampledTokens{r: r, n: n})
		}
	}
	for _, f := range res.Finished {
		if r := e.reqs[f.ID]; r != nil {
			d.finished = append(d.finished, r)
			delete(e.reqs, f.ID)
			e.releaseTokens(r)
		}
	}
	e.inStep = true
	return d
}

// encode converts a step's events into one vLLM EventBatch payload (array form, integer hashes).
func (e *Engine) encode(evs []engine.Event) []byte {
	bs := e.cfg.Engine.BlockSize
	b := vllmwire.Batch{TS: float64(time.Now().UnixNano()) / 1e9, DPRank: e.cfg.DPRank, HasDPRank: true}
	for _, ev := range evs {
		switch ev.Kind {
		case engine.EventStored:
			w := vllmwire.Event{Kind: vllmwire.KindStored, Parent: ev.ParentEngineHash, HasParent: ev.HasParent,
				BlockSize: bs, Medium: "GPU", BlockHashes: make([]uint64, len(ev.Blocks)),
				TokenIDs: make([]uint32, 0, len(ev.Blocks)*bs)}
			for i, blk := range ev.Blocks {
				w.BlockHashes[i] = blk.EngineHash
				t := e.blockTok[blk.EngineHash]
				if t == nil { // cannot happen: stored blocks belong to requests in flight
					e.log.Error("mock: stored block without tokens", "local_hash", blk.LocalHash)
					w.TokenIDs = append(w.TokenIDs, make([]uint32, bs)...)
					continue
				}
				w.TokenIDs = append(w.TokenIDs, t.tokens...)
				if t.extra != nil {
					if w.ExtraKeys == nil {
						w.ExtraKeys = make([][]vllmwire.ExtraKey, len(ev.Blocks))
					}
					w.ExtraKeys[i] = t.extra
				}
			}
			b.Events = append(b.Events, w)
		case engine.EventRemoved:
			b.Events = append(b.Events, vllmwire.Event{Kind: vllmwire.KindRemoved, Medium: "GPU",
				BlockHashes: append([]uint64(nil), ev.EngineHashes...)})
		}
	}
	p, err := vllmwire.Encode(b, vllmwire.EncodeOptions{})
	if err != nil {
		e.log.Error("mock: encode events", "err", err)
		return nil
	}
	return p
}

// deliver publishes a step's events and wakes its requests, unless the engine restarted meanwhile.
func (e *Engine) deliver(ctx context.Context, d delivery) {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	e.mu.Lock()
	e.inStep = false
	if d.gen != e.gen {
		// Restart failed the requests it knew; the finished ones had already left e.reqs.
		for _, r := range d.finished {
			r.err = errRestarted
			closeOnce(r.first)
			closeOnce(r.done)
		}
		e.mu.Unlock()
		return
	}
	if d.payload != nil {
		e.queued.Add(1)
	}
	now := time.Now()
	for _, r := range d.firsts {
		r.firstAt = now
		closeOnce(r.first)
	}
	for _, st := range d.sampled {
		if r := st.r; r.err == nil && st.n > r.generated {
			r.generated = st.n
			notify(r.progress)
		}
	}
	for _, r := range d.finished {
		e.genTokens.Add(uint64(r.output))
		e.success.Add(1)
		if r.firstAt.IsZero() {
			r.firstAt = now
		}
		r.generated = r.output
		notify(r.progress)
		closeOnce(r.first)
		closeOnce(r.done)
	}
	e.mu.Unlock()
	if d.payload != nil {
		select { // blocks when the publisher is behind: back-pressure
		case e.pubq <- pubItem{payload: d.payload}:
		case <-ctx.Done():
		}
	}
}

// closeOnce closes c unless it is closed. Every close happens under e.mu.
func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// notify signals c (capacity 1) without blocking: one pending signal covers any number of events.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// publishLoop publishes event messages in order, applying the event faults.
func (e *Engine) publishLoop(ctx context.Context) {
	for {
		var it pubItem
		select {
		case <-ctx.Done():
			return
		case it = <-e.pubq:
		}
		if it.restart != nil {
			it.restart <- e.restartPublisher(ctx)
			continue
		}
		e.mu.Lock()
		f := &e.faults
		delay := f.DelayEventsMs
		drop := false
		if f.DropEvents > 0 {
			f.DropEvents--
			drop = true
		} else if f.DropProb > 0 && e.rng.Float64() < f.DropProb {
			drop = true
		}
		dup := false
		if !drop && f.DuplicateEvents > 0 {
			f.DuplicateEvents--
			dup = true
		}
		e.mu.Unlock()
		if delay > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(delay * float64(time.Millisecond))):
			}
		}
		e.pubMu.Lock()
		p := e.pub
		e.pubMu.Unlock()
		var err error
		if drop {
			_, err = p.PublishLost(ctx, it.payload)
			e.dropped.Add(1)
		} else {
			_, err = p.Publish(ctx, it.payload)
			if err == nil && dup {
				_, err = p.Publish(ctx, it.payload)
			}
		}
		if err != nil && ctx.Err() == nil {
			e.log.Warn("mock: publish", "err", err)
		}
		e.published.Add(1)
		e.queued.Add(-1)
	}
}

// restartPublisher replaces the publisher by a fresh one (sequence from 0) on the same ports.
func (e *Engine) restartPublisher(ctx context.Context) error {
	e.pubMu.Lock()
	old, pubEP, replayEP := e.pub, e.pubAddr, e.replay
	e.pubMu.Unlock()
	if err := old.Close(); err != nil {
		e.log.Warn("mock: restart: close publisher", "err", err)
	}
	var err error
	for i := 0; i < 50; i++ { // the ports were ours a moment ago; retry briefly if the OS holds them
		if err = e.startPublisher(ctx, pubEP, replayEP); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// Restart simulates an engine process restart: requests in flight fail, the KV cache is empty, and
// the event publisher starts over with sequence 0 on the same ports. It returns once the new
// publisher is bound.
func (e *Engine) Restart(ctx context.Context) error {
	eng, err := engine.New(e.cfg.Engine)
	if err != nil {
		return err
	}
	e.sendMu.Lock()
	e.mu.Lock()
	e.gen++
	e.eng = eng
	for id, r := range e.reqs {
		r.err = errRestarted
		closeOnce(r.first)
		closeOnce(r.done)
		delete(e.reqs, id)
	}
	clear(e.blockTok)
	e.mu.Unlock()
	done := make(chan error, 1)
	e.queued.Add(1)
	select {
	case e.pubq <- pubItem{restart: done}:
		e.sendMu.Unlock()
	case <-ctx.Done():
		e.sendMu.Unlock()
		return ctx.Err()
	}
	select {
	case err = <-done:
		e.queued.Add(-1)
	case <-ctx.Done():
		return ctx.Err()
	}
	e.restarts.Add(1)
	e.log.Info("mock: engine restarted", "events", e.EventsAddr())
	return err
}

// SetFaults replaces the fault switches.
func (e *Engine) SetFaults(f Faults) {
	e.mu.Lock()
	e.faults = f
	e.mu.Unlock()
}

// Faults returns the current fault switches.
func (e *Engine) Faults() Faults {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.faults
}

// injectError reports whether a completion request should fail, and with which status.
func (e *Engine) injectError() (int, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := &e.faults
	status := f.ErrorStatus
	if status == 0 {
		status = 503
	}
	if f.ErrorNext > 0 {
		f.ErrorNext--
		return status, true
	}
	if f.ErrorProb > 0 && e.rng.Float64() < f.ErrorProb {
		return status, true
	}
	return 0, false
}

// midStreamCut reports after how many token chunks this stream is to be cut (0: not cut), consuming
// one FailMidStreamNext.
func (e *Engine) midStreamCut() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := &e.faults
	switch {
	case f.FailMidStreamNext > 0:
		f.FailMidStreamNext--
	case f.FailMidStreamAfter == 0:
		return 0
	}
	return max(f.FailMidStreamAfter, 1)
}

// BlocksDump is the answer of /debug/blocks.
type BlocksDump struct {
	Name      string `json:"name"`
	BlockSize int    `json:"block_size"`
	NumBlocks int    `json:"num_blocks"`
	Cached    int    `json:"cached"`
	Used      int    `json:"used"`
	Running   int    `json:"running"`
	Waiting   int    `json:"waiting"`
	// Quiescent: no request in flight, no step pending and every event message published.
	Quiescent bool `json:"quiescent"`
	// Published and Dropped count event messages handed to the publisher (dropped ones included).
	Published uint64 `json:"published"`
	Dropped   uint64 `json:"dropped"`
	Restarts  uint64 `json:"restarts"`
	// SeqHashes are kvrouter sequence hashes of every cached block, sorted ascending.
	SeqHashes []uint64 `json:"seq_hashes"`
}

// Blocks dumps the block pool.
func (e *Engine) Blocks() BlocksDump {
	e.mu.Lock()
	defer e.mu.Unlock()
	run, wait, _ := e.eng.Active()
	p := e.eng.Pool()
	return BlocksDump{
		Name: e.cfg.Name, BlockSize: e.cfg.Engine.BlockSize, NumBlocks: p.Capacity(), Cached: p.Cached(),
		Used: p.Used(), Running: run, Waiting: wait,
		Quiescent: run == 0 && wait == 0 && !e.inStep && e.queued.Load() == 0,
		Published: e.published.Load(), Dropped: e.dropped.Load(), Restarts: e.restarts.Load(),
		SeqHashes: p.Resident(),
	}
}

// load reports the gauges for /metrics.
func (e *Engine) load() (running, waiting int, usage float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	running, waiting, _ = e.eng.Active()
	return running, waiting, e.eng.KVUsage()
}
