package mock

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/blockhash"
)

// Tokenize is the built-in tokenizer: each white-space separated word w → 100 + XXH3-64(w) mod 50000.
// There are no special tokens (no BOS/EOS).
func Tokenize(text string) []uint32 {
	words := strings.Fields(text)
	out := make([]uint32, len(words))
	for i, w := range words {
		out[i] = wordToken(w)
	}
	return out
}

func wordToken(w string) uint32 { return 100 + uint32(xxh3.HashString(w)%50000) }

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

// Multimodal placeholder tokens (Config.ImageTokens > 0): an image part becomes
// [ImageStartToken, ImageTokens × ImageTokenID, ImageEndToken], like Qwen2-VL's
// <|vision_start|><|image_pad|>…<|vision_end|>. Word tokens are >= 100, so these never collide; the
// item's span (vLLM's mm_position) is the run of ImageTokenID.
const (
	ImageStartToken uint32 = 97
	ImageEndToken   uint32 = 98
	ImageTokenID    uint32 = 99
)

// mmItem is one image of a prompt: its identifier (the content part's uuid, as vLLM takes
// multi_modal_uuids, else blockhash.MMIdentifier of its URL) and its placeholder span, tokens.
type mmItem struct {
	identifier     string
	offset, length int
}

// renderedPrompt is a chat prompt as the mock's template renders it: token ids, the word each one
// stands for (/tokenize's token_strs), and the images.
type renderedPrompt struct {
	toks  []uint32
	strs  []string
	items []mmItem
}

func (p *renderedPrompt) text(s string) {
	for _, w := range strings.Fields(s) {
		p.toks = append(p.toks, wordToken(w))
		p.strs = append(p.strs, w)
	}
}

func (p *renderedPrompt) image(id string, n int) {
	p.toks, p.strs = append(p.toks, ImageStartToken), append(p.strs, "<image_start>")
	p.items = append(p.items, mmItem{identifier: id, offset: len(p.toks), length: n})
	for range n {
		p.toks, p.strs = append(p.toks, ImageTokenID), append(p.strs, "<image>")
	}
	p.toks, p.strs = append(p.toks, ImageEndToken), append(p.strs, "<image_end>")
}

// renderChat is the mock's chat template, producing token ids directly: each message as the words
// "<role>:" and its content's words, then "assistant:" when the generation prompt is added (the same
// ids as tokenizing "<role>: <content> … assistant:"). A conversation's next request (the previous one
// plus the assistant's answer and a new user turn) therefore extends the previous prompt's tokens. With
// imageTokens > 0, image content parts expand to placeholder tokens in place; with 0 they are ignored
// (a text-only engine).
func renderChat(msgs []chatMessage, generationPrompt bool, imageTokens int) (renderedPrompt, error) {
	var p renderedPrompt
	if len(msgs) == 0 {
		return p, errors.New("messages: required")
	}
	for i, m := range msgs {
		p.text(m.Role + ":")
		if err := p.content(m.Content, imageTokens); err != nil {
			return p, fmt.Errorf("messages[%d].content: %v", i, err)
		}
	}
	if generationPrompt {
		p.text("assistant:")
	}
	return p, nil
}

// contentPart is one OpenAI content part as the mock reads it.
type contentPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL json.RawMessage `json:"image_url"`
	UUID     string          `json:"uuid"`
}

// content renders a message content: a string, or OpenAI's content parts (text parts' words; image
// parts' placeholders when imageTokens > 0).
func (p *renderedPrompt) content(raw json.RawMessage, imageTokens int) error {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		p.text(s)
		return nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return errors.New("want a string or content parts")
	}
	for j, part := range parts {
		switch {
		case part.Type == "text":
			p.text(part.Text)
		case imageTokens > 0 && (part.Type == "image_url" || part.Type == "input_image" || part.Type == "" && part.ImageURL != nil):
			id, err := imageIdentifier(part)
			if err != nil {
				return fmt.Errorf("[%d]: %v", j, err)
			}
			p.image(id, imageTokens)
		}
	}
	return nil
}

// imageIdentifier is an image part's identity: its uuid when given, else derived from its URL.
func imageIdentifier(p contentPart) (string, error) {
	var url string
	if json.Unmarshal(p.ImageURL, &url) != nil {
		var u struct {
			URL string `json:"url"`
		}
		_ = json.Unmarshal(p.ImageURL, &u)
		url = u.URL
	}
	if p.UUID != "" {
		return p.UUID, nil
	}
	if url == "" {
		return "", errors.New("image part without a URL or a uuid")
	}
	return blockhash.MMIdentifier(url, ""), nil
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
