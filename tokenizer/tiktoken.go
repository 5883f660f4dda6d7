package tokenizer

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// llama3BaseTokens is the size of Llama-3's tiktoken vocabulary; its special tokens follow it.
const llama3BaseTokens = 128000

// llama3SpecialTokens returns Llama-3's special tokens as Meta's reference tokenizer numbers them:
// ten named slots, then reserved tokens up to 256 in all. (Llama-3.1 renamed some reserved slots;
// pass Options.SpecialTokens for those.)
func llama3SpecialTokens() map[string]uint32 {
	named := []string{
		"<|begin_of_text|>", "<|end_of_text|>",
		"<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
		"<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
		"<|start_header_id|>", "<|end_header_id|>",
		"<|reserved_special_token_4|>", "<|eot_id|>",
	}
	m := make(map[string]uint32, 256)
	for i, s := range named {
		m[s] = uint32(llama3BaseTokens + i)
	}
	for i := 5; i < 256-5; i++ {
		m["<|reserved_special_token_"+strconv.Itoa(i)+"|>"] = uint32(llama3BaseTokens + len(named) + i - 5)
	}
	return m
}

// loadTiktoken reads a tiktoken BPE file: one "base64(token bytes) rank" pair per line; the rank
// is the id. dir is the file's directory, searched for a tokenizer_config.json.
func loadTiktoken(data []byte, dir string, opts Options) (*bpeTokenizer, error) {
	ranks, err := parseTiktokenRanks(data)
	if err != nil {
		return nil, err
	}
	pattern := opts.Pattern
	if pattern == "" {
		pattern = Llama3Pattern
	}
	sp, err := newSplitter(pattern)
	if err != nil {
		return nil, err
	}
	model, err := tiktokenModel(ranks)
	if err != nil {
		return nil, err
	}
	t := &bpeTokenizer{steps: []preStep{splitStep{sp: sp}}, model: model}

	// Special tokens and the BOS: explicit, else from tokenizer_config.json, else Llama-3's.
	specials := make([]addedToken, 0, len(opts.SpecialTokens))
	bosText := "<|begin_of_text|>"
	switch cfgPath := filepath.Join(dir, "tokenizer_config.json"); {
	case opts.SpecialTokens != nil:
		for s, id := range opts.SpecialTokens {
			specials = append(specials, addedToken{content: s, id: id})
		}
		sortByID(specials)
	case fileExists(cfgPath):
		cfg, err := readTokenizerConfig(cfgPath)
		if err != nil {
			return nil, err
		}
		specials = cfg.added
		if cfg.bos != "" {
			bosText = cfg.bos
		}
	case len(ranks) == llama3BaseTokens && opts.Pattern == "":
		for s, id := range llama3SpecialTokens() {
			specials = append(specials, addedToken{content: s, id: id})
		}
	}
	t.rawAdded = newAddedMatcher(specials)
	if tok, end := t.rawAdded.longestAt(bosText, 0); tok >= 0 && end == len(bosText) {
		t.prefix = []uint32{t.rawAdded.tokens[tok].id}
	}
	if opts.AddBOS {
		if t.prefix == nil {
			return nil, fmt.Errorf("AddBOS: BOS token %q is not among the special tokens", bosText)
		}
		t.bos = t.prefix
	}
	return t, nil
}

func parseTiktokenRanks(data []byte) (map[string]uint32, error) {
	ranks := make(map[string]uint32, 1<<17)
	seen := make(map[uint32]bool, 1<<17)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		tok64, rankText, ok := bytes.Cut(text, []byte{' '})
		if !ok {
			return nil, fmt.Errorf("line %d: not a tiktoken BPE file (want \"base64-token rank\"; SentencePiece .model files are not supported)", line)
		}
		tok, err := base64.StdEncoding.DecodeString(string(tok64))
		if err != nil {
			return nil, fmt.Errorf("line %d: token: %w", line, err)
		}
		rank, err := strconv.ParseUint(string(rankText), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("line %d: rank: %w", line, err)
		}
		if _, dup := ranks[string(tok)]; dup || seen[uint32(rank)] {
			return nil, fmt.Errorf("line %d: duplicate token or rank %d", line, rank)
		}
		ranks[string(tok)] = uint32(rank)
		seen[uint32(rank)] = true
	}
	if err := sc.Err(); err != nil {
		// A binary file (a SentencePiece protobuf) typically fails here with a too-long line.
		return nil, fmt.Errorf("not a tiktoken BPE file: %w", err)
	}
	if len(ranks) == 0 {
		return nil, errors.New("empty tiktoken BPE file")
	}
	return ranks, nil
}

// tiktokenModel builds the pair table from ranks: every way of splitting a token into two tokens
// is a pair that merges into it, ranked by the token's rank (tiktoken merges the adjacent parts
// whose concatenation ranks lowest, whatever the split).
func tiktokenModel(ranks map[string]uint32) (*bpeModel, error) {
	m := &bpeModel{
		vocab:        ranks,
		merges:       make(map[uint64]uint64, 2*len(ranks)),
		ignoreMerges: true, // tiktoken looks a whole piece up before merging
	}
	for c := 0; c < 256; c++ {
		id, ok := ranks[string([]byte{byte(c)})]
		if !ok {
			return nil, fmt.Errorf("vocabulary lacks byte 0x%02x: not a byte-level BPE", c)
		}
		m.byteIDs[c] = id
	}
	for tok, rank := range ranks {
		for k := 1; k < len(tok); k++ {
			left, lok := ranks[tok[:k]]
			right, rok := ranks[tok[k:]]
			if lok && rok {
				m.merges[pairKey(left, right)] = uint64(rank)<<32 | uint64(rank)
			}
		}
	}
	return m, nil
}

type tokenizerConfig struct {
	added []addedToken
	bos   string
}

// readTokenizerConfig reads the added tokens and BOS of a Hugging Face tokenizer_config.json, which
// is how tiktoken-based repositories (Llama-3 original, Kimi) declare their special tokens.
func readTokenizerConfig(path string) (tokenizerConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return tokenizerConfig{}, fmt.Errorf("read %s: %w", path, err)
	}
	var raw struct {
		AddedTokensDecoder map[string]hfAddedToken `json:"added_tokens_decoder"`
		BOSToken           json.RawMessage         `json:"bos_token"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return tokenizerConfig{}, fmt.Errorf("parse %s: %w", path, err)
	}
	var cfg tokenizerConfig
	for idText, a := range raw.AddedTokensDecoder {
		id, err := strconv.ParseUint(idText, 10, 32)
		if err != nil {
			return tokenizerConfig{}, fmt.Errorf("parse %s: added token id %q: %w", path, idText, err)
		}
		cfg.added = append(cfg.added, addedToken{content: a.Content, id: uint32(id),
			singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip})
	}
	sortByID(cfg.added)
	// bos_token is a string or an AddedToken object.
	if !isNull(raw.BOSToken) {
		var s string
		if json.Unmarshal(raw.BOSToken, &s) != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(raw.BOSToken, &obj); err != nil {
				return tokenizerConfig{}, fmt.Errorf("parse %s: bos_token: %w", path, err)
			}
			s = obj.Content
		}
		cfg.bos = s
	}
	return cfg, nil
}

// sortByID makes the order of tokens read from maps deterministic, so that a text listed twice
// resolves the same way on every load.
func sortByID(tokens []addedToken) {
	slices.SortFunc(tokens, func(a, b addedToken) int { return cmp.Compare(a.id, b.id) })
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}
