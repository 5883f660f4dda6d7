package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// The parts of a Hugging Face tokenizer.json that decide the ids of encode(text).
type hfFile struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         hfModel         `json:"model"`
}

type hfAddedToken struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type hfModel struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	MaxInputCharsPerWord    *int            `json:"max_input_chars_per_word"`
}

// typeName returns the model type, inferred as Hugging Face does for old files without "type".
func (m *hfModel) typeName() string {
	switch {
	case m.Type != "":
		return m.Type
	case len(m.Merges) > 0:
		return "BPE"
	case len(m.Vocab) > 0 && m.Vocab[0] == '[':
		return "Unigram"
	case m.MaxInputCharsPerWord != nil || m.ContinuingSubwordPrefix != nil:
		return "WordPiece"
	default:
		return "WordLevel"
	}
}

// hfComponent is any normalizer, pre-tokenizer or post-processor; only the fields used are read.
type hfComponent struct {
	Type string `json:"type"`
	// Sequence members.
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	// Split.
	Pattern  *hfPattern `json:"pattern"`
	Behavior string     `json:"behavior"`
	Invert   bool       `json:"invert"`
	// ByteLevel.
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// TemplateProcessing.
	Single        []hfTemplatePiece          `json:"single"`
	SpecialTokens map[string]hfTemplateToken `json:"special_tokens"`
	// RobertaProcessing, BertProcessing: [token, id].
	Cls []json.RawMessage `json:"cls"`
}

type hfPattern struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

type hfTemplatePiece struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type hfTemplateToken struct {
	IDs []uint32 `json:"ids"`
}

// isNull reports an absent or null component.
func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

func loadHFJSON(data []byte, opts Options) (*bpeTokenizer, error) {
	if opts.Pattern != "" || opts.SpecialTokens != nil {
		return nil, errors.New("Options.Pattern and Options.SpecialTokens apply to tiktoken files only; a tokenizer.json defines its own")
	}
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	if typ := f.Model.typeName(); typ != "BPE" {
		return nil, fmt.Errorf("model type %q is not supported: only byte-level BPE tokenizers are", typ)
	}
	steps, err := hfPreTokenizer(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	nz, err := hfNormalizer(f.Normalizer)
	if err != nil {
		return nil, err
	}
	model, vocabText, err := hfBPEModel(&f.Model)
	if err != nil {
		return nil, err
	}
	t := &bpeTokenizer{steps: steps, model: model, norm: nz}
	var raw, normd []addedToken
	for _, a := range f.AddedTokens {
		id := a.ID
		// Hugging Face gives an added token that is also in the model vocabulary the model's id.
		if vid, ok := vocabText[a.Content]; ok {
			id = vid
		}
		tok := addedToken{content: a.Content, id: id, singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip}
		if a.Normalized {
			tok.content = t.norm.apply(tok.content)
			normd = append(normd, tok)
		} else {
			raw = append(raw, tok)
		}
	}
	t.rawAdded, t.normAdded = newAddedMatcher(raw), newAddedMatcher(normd)
	prefix, err := hfBOS(f.PostProcessor)
	if opts.AddBOS {
		if err != nil {
			return nil, err
		}
		if len(prefix) == 0 {
			return nil, errors.New("AddBOS: the post-processor adds no BOS token")
		}
		t.bos = prefix
	}
	// Without AddBOS a post-processor this reader does not understand only leaves Prefix empty;
	// callers that need it (completions prompts) load with AddBOS to see the error.
	if err == nil {
		t.prefix = prefix
	}
	return t, nil
}

// hfBPEModel builds the model from model.vocab and model.merges. It also returns the vocabulary
// keyed by its text form, to resolve added tokens.
func hfBPEModel(m *hfModel) (*bpeModel, map[string]uint32, error) {
	if m.Dropout != nil && *m.Dropout > 0 {
		return nil, nil, fmt.Errorf("BPE dropout %v makes encoding random; not supported", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" ||
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, nil, errors.New("BPE with continuing_subword_prefix or end_of_word_suffix is not byte-level; not supported")
	}
	var vocabText map[string]uint32
	if err := json.Unmarshal(m.Vocab, &vocabText); err != nil {
		return nil, nil, fmt.Errorf("parse model.vocab: %w", err)
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, nil, err
	}
	model := &bpeModel{
		vocab:        make(map[string]uint32, len(vocabText)),
		merges:       make(map[uint64]uint64, len(merges)),
		ignoreMerges: m.IgnoreMerges,
	}
	for text, id := range vocabText {
		// Entries outside the byte-level alphabet cannot come out of BPE over bytes (they are
		// reachable only as added tokens), so they are left out.
		if b, ok := decodeByteLevel(text); ok {
			model.vocab[string(b)] = id
		}
	}
	for c := 0; c < 256; c++ {
		id, ok := vocabText[string(runeOfByte[c])]
		if !ok {
			return nil, nil, fmt.Errorf("vocabulary lacks byte 0x%02x (%q): not a byte-level BPE", c, runeOfByte[c])
		}
		model.byteIDs[c] = id
	}
	for rank, mg := range merges {
		left, lok := vocabText[mg[0]]
		right, rok := vocabText[mg[1]]
		merged, mok := vocabText[mg[0]+mg[1]]
		if !lok || !rok || !mok {
			return nil, nil, fmt.Errorf("merge %d %q: token not in vocabulary", rank, mg[0]+" "+mg[1])
		}
		// A repeated pair keeps its last rank, as Hugging Face's merge map does.
		model.merges[pairKey(left, right)] = uint64(rank)<<32 | uint64(merged)
	}
	return model, vocabText, nil
}

// parseMerges reads model.merges in either format: "left right" strings (older files) or
// [left, right] pairs (tokenizers ≥ 0.20).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	var lines []string
	if err := json.Unmarshal(raw, &lines); err == nil {
		out := make([][2]string, len(lines))
		for i, l := range lines {
			parts := strings.Split(l, " ")
			if len(parts) != 2 {
				return nil, fmt.Errorf("merge %d %q: want two tokens separated by one space", i, l)
			}
			out[i] = [2]string{parts[0], parts[1]}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("parse model.merges: %w", err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("merge %d: want 2 tokens, got %d", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

// hfNormalizer accepts no normalizer or Unicode normalisation forms (alone or in a Sequence).
func hfNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("parse normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return normalizer{norm.NFC}, nil
	case "NFD":
		return normalizer{norm.NFD}, nil
	case "NFKC":
		return normalizer{norm.NFKC}, nil
	case "NFKD":
		return normalizer{norm.NFKD}, nil
	case "Sequence":
		var out normalizer
		for _, sub := range c.Normalizers {
			n, err := hfNormalizer(sub)
			if err != nil {
				return nil, err
			}
			out = append(out, n...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("normalizer %q is not supported (byte-level BPE files use none or NFC)", c.Type)
}

// hfPreTokenizer accepts Split (Isolated) and ByteLevel pre-tokenizers, alone or in a Sequence,
// and requires a ByteLevel one: without it a "BPE" model works on characters (SentencePiece
// style, e.g. Llama-2), which this package does not implement.
func hfPreTokenizer(raw json.RawMessage) ([]preStep, error) {
	if isNull(raw) {
		return nil, errors.New("BPE without a ByteLevel pre-tokenizer (SentencePiece-style BPE) is not supported")
	}
	var flat []hfComponent
	var walk func(json.RawMessage) error
	walk = func(r json.RawMessage) error {
		var c hfComponent
		if err := json.Unmarshal(r, &c); err != nil {
			return fmt.Errorf("parse pre_tokenizer: %w", err)
		}
		if c.Type == "Sequence" {
			for _, sub := range c.Pretokenizers {
				if err := walk(sub); err != nil {
					return err
				}
			}
			return nil
		}
		flat = append(flat, c)
		return nil
	}
	if err := walk(raw); err != nil {
		return nil, err
	}
	var steps []preStep
	byteLevel := false
	for _, c := range flat {
		if byteLevel {
			return nil, fmt.Errorf("pre-tokenizer %q after ByteLevel is not supported", c.Type)
		}
		switch c.Type {
		case "Split":
			step, err := hfSplit(c)
			if err != nil {
				return nil, err
			}
			steps = append(steps, step)
		case "ByteLevel":
			byteLevel = true
			step := byteLevelStep{addPrefixSpace: c.AddPrefixSpace}
			if c.UseRegex == nil || *c.UseRegex { // Hugging Face's default is true
				sp, err := newSplitter(gpt2Pattern)
				if err != nil {
					return nil, err
				}
				step.sp = sp
			}
			steps = append(steps, step)
		default:
			return nil, fmt.Errorf("pre-tokenizer %q is not supported (byte-level BPE uses Split and ByteLevel)", c.Type)
		}
	}
	if !byteLevel {
		return nil, errors.New("BPE without a ByteLevel pre-tokenizer (SentencePiece-style BPE) is not supported")
	}
	return steps, nil
}

func hfSplit(c hfComponent) (preStep, error) {
	if c.Behavior != "Isolated" || c.Invert {
		return nil, fmt.Errorf("Split pre-tokenizer with behavior %q, invert %v is not supported (only Isolated)", c.Behavior, c.Invert)
	}
	var pattern string
	switch {
	case c.Pattern != nil && c.Pattern.Regex != nil:
		pattern = *c.Pattern.Regex
	case c.Pattern != nil && c.Pattern.String != nil:
		pattern = regexpQuote(*c.Pattern.String)
	default:
		return nil, errors.New("Split pre-tokenizer without a pattern")
	}
	sp, err := newSplitter(pattern)
	if err != nil {
		return nil, err
	}
	return splitStep{sp: sp}, nil
}

// regexpQuote escapes a literal for regexp2's .NET syntax.
func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\*+?|{}[]()^$.# `, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// hfBOS returns the ids the post-processor puts before the sequence: the leading special tokens
// of a TemplateProcessing "single" template, or the cls token of Roberta/Bert processing.
func hfBOS(raw json.RawMessage) ([]uint32, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("parse post_processor: %w", err)
	}
	switch c.Type {
	case "Sequence":
		for _, sub := range c.Processors {
			bos, err := hfBOS(sub)
			if err != nil || len(bos) > 0 {
				return bos, err
			}
		}
		return nil, nil
	case "TemplateProcessing":
		var bos []uint32
		for _, p := range c.Single {
			if p.SpecialToken == nil {
				break // the sequence itself: what follows is not a prefix
			}
			st, ok := c.SpecialTokens[p.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("post_processor: template token %q has no ids", p.SpecialToken.ID)
			}
			bos = append(bos, st.IDs...)
		}
		return bos, nil
	case "RobertaProcessing", "BertProcessing":
		if len(c.Cls) != 2 {
			return nil, fmt.Errorf("post_processor %s: malformed cls", c.Type)
		}
		var id uint32
		if err := json.Unmarshal(c.Cls[1], &id); err != nil {
			return nil, fmt.Errorf("post_processor %s: cls id: %w", c.Type, err)
		}
		return []uint32{id}, nil
	}
	return nil, nil
}
