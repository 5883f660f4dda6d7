package gateway

import (
	"context"

	"github.com/kvrouter/kvrouter/gateway/prompt"
)

// Tokenizer turns a request body into the prompt's token ids as the pool's engines compute them
// (SPEC §7.2 "Tokens"); *prompt.Resolver implements it. An error wrapping prompt.ErrBadRequest is the
// client's fault (400); any other error routes the request by load only.
type Tokenizer interface {
	Tokens(ctx context.Context, req prompt.Request) (prompt.Result, error)
}
