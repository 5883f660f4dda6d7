package prompt

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ardanlabs/jinja"

	"github.com/kvrouter/kvrouter/statestore"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// Options configure a Resolver. Zero values take the defaults; Validate rejects the rest.
type Options struct {
	// SegmentCacheTokens bounds the chat prefix cache (encodings of text segments between added
	// tokens, shared by all pools), in cached token ids plus 24 per entry; one token costs 4 bytes,
	// so the default 4 Mi tokens is about 16 MiB. Negative disables the cache.
	SegmentCacheTokens int64
	// EngineCacheTokens bounds the cache of POST /tokenize answers, in cached token ids plus 24 per
	// entry (default 4 Mi tokens, about 16 MiB). Negative disables it.
	EngineCacheTokens int64
	// EngineTimeout bounds one POST /tokenize, connection included (default 5 s).
	EngineTimeout time.Duration
	// MaxEngineResponseBytes bounds a /tokenize answer, bytes (default 32 MiB: about 3 M token ids).
	MaxEngineResponseBytes int64
	// HTTPClient sends /tokenize requests (default: a client of its own; EngineTimeout applies per
	// request either way).
	HTTPClient *http.Client
}

// Defaults of Options.
const (
	DefaultSegmentCacheTokens     = 4 << 20
	DefaultEngineCacheTokens      = 4 << 20
	DefaultEngineTimeout          = 5 * time.Second
	DefaultMaxEngineResponseBytes = 32 << 20
)

func (o Options) withDefaults() Options {
	if o.SegmentCacheTokens == 0 {
		o.SegmentCacheTokens = DefaultSegmentCacheTokens
	}
	if o.EngineCacheTokens == 0 {
		o.EngineCacheTokens = DefaultEngineCacheTokens
	}
	if o.EngineTimeout == 0 {
		o.EngineTimeout = DefaultEngineTimeout
	}
	if o.MaxEngineResponseBytes == 0 {
		o.MaxEngineResponseBytes = DefaultMaxEngineResponseBytes
	}
	return o
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	if o.EngineTimeout < 0 {
		return fmt.Errorf("prompt: EngineTimeout must be positive, got %v", o.EngineTimeout)
	}
	if o.MaxEngineResponseBytes < 0 {
		return fmt.Errorf("prompt: MaxEngineResponseBytes must be positive, got %d", o.MaxEngineResponseBytes)
	}
	return nil
}

// Request is one OpenAI request to resolve into tokens.
type Request struct {
	// Pool names the pool; it keys the engine answer cache.
	Pool string
	// Config is the pool's settings: Tokenizer, ChatTemplate, Tokenize.
	Config statestore.PoolConfig
	Kind   Kind
	// Body is the request body as received (not modified).
	Body []byte
	// EngineURL is the base URL of the worker to ask with tokenize "engine" ("http://host:port";
	// /tokenize is appended). Ignored in the other modes.
	EngineURL string
}

// Resolver turns request bodies into token ids. Tokenizers and chat templates are loaded on first
// use and kept by path (a load error is kept too and returned on every call naming the file: fix
// the file and restart, or point the pool at another path). Safe for concurrent use.
type Resolver struct {
	opts   Options
	client *http.Client

	mu         sync.Mutex
	tokenizers map[string]*tokenizerEntry
	templates  map[templateKey]*templateEntry

	segments    *lru[segmentKey, []uint32] // nil when disabled
	engineCache *lru[engineKey, []uint32]
	inflightMu  sync.Mutex
	inflight    map[engineKey]*engineCall
}

type tokenizerEntry struct {
	once sync.Once
	tok  tokenizer.Segmenter
	err  error
}

type templateKey struct{ tokenizer, template string }

type templateEntry struct {
	once sync.Once
	ct   *chatTemplate // nil: no template configured or found
	err  error
}

// NewResolver returns a Resolver; it loads nothing until asked.
func NewResolver(opts Options) (*Resolver, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	r := &Resolver{
		opts:       opts,
		client:     opts.HTTPClient,
		tokenizers: map[string]*tokenizerEntry{},
		templates:  map[templateKey]*templateEntry{},
		inflight:   map[engineKey]*engineCall{},
	}
	if r.client == nil {
		r.client = &http.Client{Timeout: opts.EngineTimeout}
	}
	if opts.SegmentCacheTokens > 0 {
		r.segments = newLRU[segmentKey, []uint32](opts.SegmentCacheTokens)
	}
	engineCap := max(opts.EngineCacheTokens, 0) // 0: every put is dropped
	r.engineCache = newLRU[engineKey, []uint32](engineCap)
	return r, nil
}

// Stats reports the segment (chat prefix) cache and the engine answer cache.
func (r *Resolver) Stats() (segments, engine CacheStats) {
	if r.segments != nil {
		segments = r.segments.stats()
	}
	return segments, r.engineCache.stats()
}

func (r *Resolver) tokenizer(path string) (*tokenizerEntry, error) {
	r.mu.Lock()
	e, ok := r.tokenizers[path]
	if !ok {
		e = &tokenizerEntry{}
		r.tokenizers[path] = e
	}
	r.mu.Unlock()
	e.once.Do(func() {
		tok, err := tokenizer.Load(path)
		if err != nil {
			e.err = fmt.Errorf("prompt: pool tokenizer: %w", err)
			return
		}
		sg, ok := tok.(tokenizer.Segmenter)
		if !ok {
			e.err = fmt.Errorf("prompt: pool tokenizer %s: no segment access", path)
			return
		}
		e.tok = sg
	})
	return e, e.err
}

func (r *Resolver) template(cfg statestore.PoolConfig) (*chatTemplate, error) {
	key := templateKey{cfg.Tokenizer, cfg.ChatTemplate}
	r.mu.Lock()
	e, ok := r.templates[key]
	if !ok {
		e = &templateEntry{}
		r.templates[key] = e
	}
	r.mu.Unlock()
	e.once.Do(func() { e.ct, e.err = loadChatTemplate(cfg.Tokenizer, cfg.ChatTemplate) })
	return e.ct, e.err
}

var unknown = Result{Known: false, Source: SourceNone}

// Tokens returns the token ids the engine will compute for req's body (see docs/API.md "Gateway:
// tokens for routing"). Errors: ErrBadRequest (the body; answer 400), ErrTemplate (the template
// failed; route by load only), ErrEngine (POST /tokenize failed; route by load only), or a load
// error naming the tokenizer or template file (a configuration problem).
func (r *Resolver) Tokens(ctx context.Context, req Request) (Result, error) {
	d, err := parseBody(req.Body)
	if err != nil {
		return unknown, err
	}
	model, err := modelName(d)
	if err != nil {
		return unknown, err
	}
	mode := req.Config.TokenizeMode()
	switch req.Kind {
	case Completion:
		cp, err := parseCompletion(d)
		if err != nil {
			return unknown, err
		}
		if cp.isTokens {
			return Result{Tokens: cp.ids, Known: true, Source: SourceRequest}, nil
		}
		switch mode {
		case statestore.TokenizeLocal:
			ids, err := r.localText(req.Config.Tokenizer, cp.text, cp.addSpecial)
			return known(ids, SourceLocal, err)
		case statestore.TokenizeEngine:
			text, add := cp.text, cp.addSpecial
			ids, err := r.engineTokens(ctx, req.Pool, req.EngineURL, tokenizeRequest{Model: model, Prompt: &text, AddSpecialTokens: &add})
			return known(ids, SourceEngine, err)
		}
		return unknown, nil
	case Chat:
		switch mode {
		case statestore.TokenizeLocal:
			return r.localChat(req.Config, d)
		case statestore.TokenizeEngine:
			cr, err := parseChat(d, false)
			if err != nil {
				return unknown, err // the same validation as the local path
			}
			return r.engineChat(ctx, req, model, cr.multimodal)
		}
		return unknown, nil
	}
	return unknown, fmt.Errorf("prompt: unknown request kind %d", req.Kind)
}

func known(ids []uint32, src Source, err error) (Result, error) {
	if err != nil {
		return unknown, err
	}
	return Result{Tokens: ids, Known: true, Source: src}, nil
}

// localText encodes text with the pool's tokenizer, prefixed by the post-processor's BOS when
// addSpecial (vLLM's add_special_tokens).
func (r *Resolver) localText(path, text string, addSpecial bool) ([]uint32, error) {
	if path == "" {
		return nil, errors.New("prompt: the pool tokenizes locally but names no tokenizer file")
	}
	e, err := r.tokenizer(path)
	if err != nil {
		return nil, err
	}
	var ids []uint32
	if addSpecial {
		ids = append(ids, e.tok.Prefix()...)
	}
	if r.segments != nil {
		ids, err = encodeCached(r.segments, e, text, ids)
	} else {
		ids, err = encodeUncached(e.tok, text, ids)
	}
	if err != nil {
		if errors.Is(err, tokenizer.ErrInvalidUTF8) {
			return nil, badRequest("%v", err)
		}
		return nil, fmt.Errorf("prompt: %w", err)
	}
	return ids, nil
}

func (r *Resolver) localChat(cfg statestore.PoolConfig, d *jinja.Dict) (Result, error) {
	ct, err := r.template(cfg)
	if err != nil {
		return unknown, err
	}
	if ct == nil {
		// No chat template: the engine refuses the request too (transformers has no default
		// template any more); route it by load and let the engine answer.
		return unknown, nil
	}
	cr, err := parseChat(d, ct.openAIContent)
	if err != nil {
		return unknown, err
	}
	if cr.multimodal {
		return unknown, nil
	}
	text, err := ct.render(cr.vars)
	if err != nil {
		return unknown, err
	}
	if cr.continueFinal {
		if text, err = continueFinalMessage(text, cr.vars.messages); err != nil {
			return unknown, err
		}
	}
	// vLLM tokenizes chat prompts with add_special_tokens=False (the template writes the BOS);
	// a client may ask otherwise.
	addSpecial, err := optBool(d, "add_special_tokens", false)
	if err != nil {
		return unknown, err
	}
	ids, err := r.localText(cfg.Tokenizer, text, addSpecial)
	return known(ids, SourceLocal, err)
}
