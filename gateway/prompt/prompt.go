// Package prompt turns OpenAI-style request bodies into the token ids the engine will compute, so the
// gateway routes on exact block hashes (SPEC §7.2 "Tokens"): completions' string prompts through the
// pool's tokenizer.json, token-array prompts as given, chat messages rendered with the pool's Jinja chat
// template the way Hugging Face transformers and vLLM do, then tokenized without a second BOS; or the
// engine's own POST /tokenize (cached by prompt digest); or nothing (load-only routing).
//
// Use: one Resolver per process (NewResolver(Options{})), then per request
//
//	res, err := resolver.Tokens(ctx, prompt.Request{Pool: name, Config: poolConfig, Kind: prompt.Chat,
//		Body: body, EngineURL: workerURL})
//
// res.Known false means route by load only. Errors: ErrBadRequest (answer 400), ErrTemplate and
// ErrEngine (route by load only), anything else is the pool's tokenizer or template file. The rules
// (BOS, message normalisation, caches) are in docs/API.md "Gateway: tokens for routing".
package prompt

import (
	"errors"

	"github.com/kvrouter/kvrouter/blockhash"
)

// Kind is the OpenAI endpoint a body belongs to.
type Kind uint8

const (
	// Completion is POST /v1/completions ("prompt": a string or an array of token ids).
	Completion Kind = iota
	// Chat is POST /v1/chat/completions ("messages", optional "tools").
	Chat
)

// Source says where a Result's tokens came from (the gateway reports it in logs and metrics).
type Source string

const (
	SourceRequest Source = "request" // token ids given in the body
	SourceLocal   Source = "local"   // the pool's tokenizer (and chat template)
	SourceEngine  Source = "engine"  // a worker's POST /tokenize
	SourceNone    Source = "none"    // no tokenizer: the gateway routes by load only
)

// Result is a prompt's token ids, or the statement that they are unknown.
type Result struct {
	Tokens []uint32
	// Known is false when no tokenizer applies: route by load only (header x-kvrouter-overlap: unknown).
	Known  bool
	Source Source
	// MMItems are the prompt's images (identity and placeholder span), when Known; the router folds
	// them into the blocks they cover.
	MMItems []blockhash.MMItem
	// Body, when not nil, is the body to forward instead of the request's: the gateway assigned the
	// images' uuids (see engineChat). Set whether or not the tokens are known.
	Body []byte
}

// ErrBadRequest marks errors in the request body: not JSON, fields of the wrong type, a
// conversation its chat template refuses (raise_exception). The gateway answers 400.
var ErrBadRequest = errors.New("prompt: bad request")

// ErrTemplate marks a chat template that failed to render for a reason other than the request
// (a construct the Go Jinja engine lacks, a template bug). The gateway may route by load only.
var ErrTemplate = errors.New("prompt: chat template failed")
