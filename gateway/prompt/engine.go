package prompt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
)

// ErrEngine marks a failed POST /tokenize (unreachable worker, timeout, non-200 answer, malformed
// or oversized answer). The gateway routes such a request by load only.
var ErrEngine = errors.New("prompt: engine tokenize failed")

// tokenizeRequest is the body of vLLM's POST /tokenize: TokenizeCompletionRequest ("prompt") or
// TokenizeChatRequest ("messages" and the chat options), with the fields as the client sent them.
type tokenizeRequest struct {
	Model                string          `json:"model,omitempty"`
	Prompt               *string         `json:"prompt,omitempty"`
	Messages             json.RawMessage `json:"messages,omitempty"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt,omitempty"`
	ContinueFinalMessage *bool           `json:"continue_final_message,omitempty"`
	AddSpecialTokens     *bool           `json:"add_special_tokens,omitempty"`
	Tools                json.RawMessage `json:"tools,omitempty"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs,omitempty"`
}

// tokenizeResponse is vLLM's answer: {"count", "max_model_len", "tokens", "token_strs"}.
type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
}

// engineChatRequest builds the /tokenize body of a chat request from the raw body, so the engine
// sees the client's messages byte for byte.
func engineChatRequest(body []byte, model string) (tokenizeRequest, error) {
	var raw struct {
		Messages             json.RawMessage `json:"messages"`
		Tools                json.RawMessage `json:"tools"`
		ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
		AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
		ContinueFinalMessage *bool           `json:"continue_final_message"`
		AddSpecialTokens     *bool           `json:"add_special_tokens"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return tokenizeRequest{}, badRequest("%v", err)
	}
	tr := tokenizeRequest{
		Model: model, Messages: raw.Messages, AddGenerationPrompt: raw.AddGenerationPrompt,
		ContinueFinalMessage: raw.ContinueFinalMessage, AddSpecialTokens: raw.AddSpecialTokens,
	}
	if !isNullJSON(raw.Tools) {
		tr.Tools = raw.Tools
	}
	if !isNullJSON(raw.ChatTemplateKwargs) {
		tr.ChatTemplateKwargs = raw.ChatTemplateKwargs
	}
	return tr, nil
}

// engineKey is the cache key of a /tokenize answer: SHA-256 of the pool name and the request body
// (compact JSON, so the client's whitespace does not matter). The worker URL is not part of it:
// every worker of a pool runs the same model and tokenizer.
type engineKey [sha256.Size]byte

func (r *Resolver) engineTokens(ctx context.Context, pool, baseURL string, tr tokenizeRequest) ([]uint32, error) {
	body, err := json.Marshal(tr)
	if err != nil {
		return nil, fmt.Errorf("prompt: encode /tokenize request: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(pool))
	h.Write([]byte{0})
	h.Write(body)
	var key engineKey
	h.Sum(key[:0])
	// Answers are copied out: the cached slice is shared, the caller's is its own.
	if ids, ok := r.engineCache.get(key); ok {
		return slices.Clone(ids), nil
	}
	if baseURL == "" {
		return nil, fmt.Errorf("%w: no worker URL to ask", ErrEngine)
	}
	// Identical prompts arriving together (an agent's fan-out) share one /tokenize call.
	r.inflightMu.Lock()
	if c, ok := r.inflight[key]; ok {
		c.waiters++
		r.inflightMu.Unlock()
		select {
		case <-c.done:
			return slices.Clone(c.ids), c.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting for /tokenize: %v", ErrEngine, ctx.Err())
		}
	}
	c := &engineCall{done: make(chan struct{})}
	r.inflight[key] = c
	r.inflightMu.Unlock()

	c.ids, c.err = r.postTokenize(ctx, strings.TrimSuffix(baseURL, "/")+"/tokenize", body)
	if c.err == nil {
		r.engineCache.put(key, c.ids, int64(len(c.ids))+segmentOverhead)
	}
	r.inflightMu.Lock()
	delete(r.inflight, key)
	r.inflightMu.Unlock()
	close(c.done)
	return slices.Clone(c.ids), c.err
}

// engineCall is a /tokenize call in flight; waiters read ids and err once done is closed.
type engineCall struct {
	done    chan struct{}
	ids     []uint32
	err     error
	waiters int // callers sharing it (under Resolver.inflightMu; read by tests)
}

func (r *Resolver) postTokenize(ctx context.Context, url string, body []byte) ([]uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.EngineTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrEngine, url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrEngine, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, r.opts.MaxEngineResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: read answer: %v", ErrEngine, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered %d: %.200s", ErrEngine, url, resp.StatusCode, data)
	}
	if int64(len(data)) > r.opts.MaxEngineResponseBytes {
		return nil, fmt.Errorf("%w: %s: answer larger than %d bytes", ErrEngine, url, r.opts.MaxEngineResponseBytes)
	}
	var tr tokenizeResponse
	if err := json.Unmarshal(data, &tr); err != nil {
		return nil, fmt.Errorf("%w: %s: answer is not a tokenize response: %v", ErrEngine, url, err)
	}
	if tr.Tokens == nil {
		return nil, fmt.Errorf("%w: %s: answer has no \"tokens\"", ErrEngine, url)
	}
	return tr.Tokens, nil
}
