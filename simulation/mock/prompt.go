package mock

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/zeebo/xxh3"
)

// Tokenize is the built-in tokenizer: each white-space separated word w → 100 + XXH3-64(w) mod 50000.
// There are no special tokens (no BOS/EOS).
func Tokenize(text string) []uint32 {
	words := strings.Fields(text)
	out := make([]uint32, len(words))
	for i, w := range words {
		out[i] = 100 + uint32(xxh3.HashString(w)%50000)
	}
	return out
}

// chatMessage is one OpenAI chat message; only role and content matter to the mock.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// chatOptions are vLLM's chat template switches (request fields of /v1/chat/completions and /tokenize).
type chatOptions struct {
	// AddGenerationPrompt ends the render with the assistant's turn header; vLLM's default is true.
	AddGenerationPrompt *bool `json:"add_generation_prompt"`
	// ContinueFinalMessage leaves the last message open; the mock's template has no end-of-turn token,
	// so it only excludes AddGenerationPrompt (vLLM rejects both together).
	ContinueFinalMessage bool `json:"continue_final_message"`
}

// generationPrompt resolves the switches: whether to add "assistant:".
func (o chatOptions) generationPrompt() (bool, error) {
	add := o.AddGenerationPrompt == nil || *o.AddGenerationPrompt
	if o.ContinueFinalMessage {
		if o.AddGenerationPrompt != nil && *o.AddGenerationPrompt {
			return false, errors.New("cannot set both `continue_final_message` and `add_generation_prompt` to true")
		}
		add = false
	}
	return add, nil
}

// renderChat is the mock's chat template: each message as "<role>: <content>", separated by spaces,
// then "assistant:" when the generation prompt is added. A conversation's next request (the previous
// one plus the assistant's answer and a new user turn) therefore extends the previous prompt's tokens.
func renderChat(msgs []chatMessage, generationPrompt bool) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("messages: required")
	}
	var b strings.Builder
	for i, m := range msgs {
		text, err := contentText(m.Content)
		if err != nil {
			return "", fmt.Errorf("messages[%d].content: %v", i, err)
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(text)
	}
	if generationPrompt {
		b.WriteString(" assistant:")
	}
	return b.String(), nil
}

// contentText accepts a string or OpenAI's content parts ([{type:"text", text}]).
func contentText(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
			b.WriteByte(' ')
		}
	}
	return b.String(), nil
}

// promptIDs reads a completion prompt: a string (tokenized) or an array of token ids (taken as they
// are, as vLLM accepts).
func promptIDs(raw json.RawMessage) ([]uint32, error) {
	if len(raw) == 0 {
		return nil, errors.New("prompt: required")
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return Tokenize(text), nil
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, errors.New("prompt: want a string or an array of token ids")
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id > 1<<32-1 {
			return nil, fmt.Errorf("prompt[%d]: token id %d out of range", i, id)
		}
		out[i] = uint32(id)
	}
	return out, nil
}
