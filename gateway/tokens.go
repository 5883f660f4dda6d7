package gateway

import (
	"context"
	"encoding/json"

	"github.com/kvrouter/kvrouter/gateway/prompt"
	"github.com/kvrouter/kvrouter/statestore"
)

// Tokenizer turns a request body into the prompt's token ids as the pool's engines compute them
// (SPEC §7.2 "Tokens"). engineURL is one of the pool's workers, for pools with tokenize: engine ("" when
// the pool has no worker with a URL). An error wrapping statestore.ErrInvalid is the client's fault (400);
// any other error fails the request with 500. The prompt package's resolver implements it.
type Tokenizer interface {
	Tokens(ctx context.Context, cfg statestore.PoolConfig, kind prompt.Kind, body []byte, engineURL string) (prompt.Result, error)
}

// RequestTokens is the built-in Tokenizer: a completion whose "prompt" is an array of token ids routes on
// those ids; everything else (text prompts, chat messages) routes by load only.
type RequestTokens struct{}

// Tokens implements Tokenizer.
func (RequestTokens) Tokens(_ context.Context, _ statestore.PoolConfig, kind prompt.Kind, body []byte, _ string) (prompt.Result, error) {
	if kind != prompt.Completion {
		return prompt.Result{Source: prompt.SourceNone}, nil
	}
	var b struct {
		Prompt json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(body, &b) != nil || len(b.Prompt) == 0 || b.Prompt[0] != '[' {
		return prompt.Result{Source: prompt.SourceNone}, nil
	}
	var ids []uint32
	if json.Unmarshal(b.Prompt, &ids) != nil || len(ids) == 0 {
		// A batch of prompts ([[…], […]]) or strings: not one prompt's ids.
		return prompt.Result{Source: prompt.SourceNone}, nil
	}
	return prompt.Result{Tokens: ids, Known: true, Source: prompt.SourceRequest}, nil
}
