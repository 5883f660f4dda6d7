package mock

import (
	"encoding/json"
	"io"
	"net/http"
)

// tokenizeRequest is the union of vLLM's TokenizeCompletionRequest {model, prompt, add_special_tokens,
// return_token_strs} and TokenizeChatRequest {model, messages, add_generation_prompt,
// continue_final_message, add_special_tokens, return_token_strs}; "messages" selects the chat form.
type tokenizeRequest struct {
	Model    string        `json:"model"`
	Prompt   *string       `json:"prompt"`
	Messages []chatMessage `json:"messages"`
	chatOptions
	// AddSpecialTokens is accepted and has no effect: the mock's vocabulary has no special tokens.
	AddSpecialTokens *bool `json:"add_special_tokens"`
	ReturnTokenStrs  bool  `json:"return_token_strs"`
}

// tokenizeResponse is vLLM's TokenizeResponse.
type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
	TokenStrs   []string `json:"token_strs,omitempty"`
}

// tokenize serves POST /tokenize: the token ids the engine computes for that prompt or those messages
// when serving a completion (the same functions build both).
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&req); err != nil {
		writeError(w, 400, "invalid JSON body: "+err.Error())
		return
	}
	if _, ok := s.servedModel(w, req.Model); !ok {
		return
	}
	var p renderedPrompt
	switch {
	case req.Messages != nil:
		gen, err := req.generationPrompt()
		if err == nil {
			p, err = renderChat(req.Messages, gen, s.cfg.ImageTokens)
		}
		if err != nil {
			writeError(w, 400, err.Error())
			return
		}
	case req.Prompt != nil:
		p.text(*req.Prompt)
	default:
		writeError(w, 400, "prompt or messages: required")
		return
	}
	resp := tokenizeResponse{Tokens: p.toks, MaxModelLen: s.maxModelLen()}
	if resp.Tokens == nil {
		resp.Tokens = []uint32{}
	}
	resp.Count = len(resp.Tokens)
	if req.ReturnTokenStrs {
		resp.TokenStrs = p.strs
	}
	writeJSON(w, 200, resp)
}
