package prompt

import (
	"fmt"

	"github.com/ardanlabs/jinja"
)

// badRequest wraps a body problem in ErrBadRequest.
func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// parseBody decodes a request body; it must be a JSON object.
func parseBody(body []byte) (*jinja.Dict, error) {
	v, err := decodeJSON(body)
	if err != nil {
		return nil, badRequest("body is not valid JSON: %v", err)
	}
	if !v.IsDict() {
		return nil, badRequest("body must be a JSON object")
	}
	return v.AsDict(), nil
}

// field returns d[key], or Undefined when absent.
func field(d *jinja.Dict, key string) jinja.Value {
	if v, ok := d.Get(key); ok {
		return v
	}
	return jinja.Undefined()
}

// optBool reads an optional boolean field (absent or null → def).
func optBool(d *jinja.Dict, key string, def bool) (bool, error) {
	v := field(d, key)
	switch {
	case v.IsUndefined() || v.IsNone():
		return def, nil
	case v.IsBool():
		return v.AsBool(), nil
	}
	return false, badRequest("%q must be a boolean", key)
}

// modelName reads the body's "model" (a string, or absent).
func modelName(d *jinja.Dict) (string, error) {
	v := field(d, "model")
	switch {
	case v.IsUndefined() || v.IsNone():
		return "", nil
	case v.IsString():
		return v.AsString(), nil
	}
	return "", badRequest("\"model\" must be a string")
}

// completionPrompt is the prompt of a /v1/completions body: text to tokenize, or token ids given.
type completionPrompt struct {
	text     string
	ids      []uint32
	isTokens bool
	// addSpecial is vLLM's add_special_tokens (default true for completions): prepend the BOS.
	addSpecial bool
}

// parseCompletion reads "prompt": a string, an array of token ids, or a batch (an array of
// strings or of token-id arrays). A batch is routed by its first prompt: vLLM runs every prompt
// of a batch on the worker the request goes to, and the first prompt's blocks are the best single
// predictor of what that worker will reuse.
func parseCompletion(d *jinja.Dict) (completionPrompt, error) {
	cp := completionPrompt{}
	var err error
	if cp.addSpecial, err = optBool(d, "add_special_tokens", true); err != nil {
		return cp, err
	}
	p := field(d, "prompt")
	switch {
	case p.IsString():
		cp.text = p.AsString()
		return cp, nil
	case p.IsList():
		items := p.AsList().Items
		if len(items) == 0 {
			return cp, badRequest("\"prompt\" must not be an empty array")
		}
		first := items[0]
		switch {
		case first.IsInt():
			cp.ids, err = tokenIDs(p, "prompt")
			cp.isTokens = true
			return cp, err
		case first.IsString():
			for i, it := range items {
				if !it.IsString() {
					return cp, badRequest("\"prompt\"[%d] must be a string like the first", i)
				}
			}
			cp.text = first.AsString()
			return cp, nil
		case first.IsList():
			for i, it := range items {
				if _, err := tokenIDs(it, fmt.Sprintf("prompt[%d]", i)); err != nil {
					return cp, err
				}
			}
			cp.ids, err = tokenIDs(first, "prompt[0]")
			cp.isTokens = true
			return cp, err
		}
	case p.IsUndefined() || p.IsNone():
		return cp, badRequest("\"prompt\" is required")
	}
	return cp, badRequest("\"prompt\" must be a string, an array of token ids, or an array of either")
}

// tokenIDs reads an array of token ids (integers in 0..2^32-1).
func tokenIDs(v jinja.Value, name string) ([]uint32, error) {
	if !v.IsList() {
		return nil, badRequest("%q must be an array of token ids", name)
	}
	items := v.AsList().Items
	ids := make([]uint32, len(items))
	for i, it := range items {
		if !it.IsInt() || it.AsInt() < 0 || it.AsInt() > 1<<32-1 {
			return nil, badRequest("%s[%d] must be a token id (an integer in 0..4294967295)", name, i)
		}
		ids[i] = uint32(it.AsInt())
	}
	return ids, nil
}
