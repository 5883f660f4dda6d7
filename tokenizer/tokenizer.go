package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// Tokenizer turns text into the token ids the engine computes for the same text.
// Implementations are safe for concurrent use.
type Tokenizer interface {
	// Encode returns the ids of text as Hugging Face's encode(text, add_special_tokens=False)
	// does (plus the BOS when Options.AddBOS is set). Added tokens written in the text, such as
	// "<|eot_id|>", become their ids. Text that is not valid UTF-8 fails with ErrInvalidUTF8:
	// the engine could not have received it either.
	Encode(text string) ([]uint32, error)
	// Name identifies the tokenizer and its settings, for logs and for checking that two
	// components use the same one: "<file name>@<first 12 hex digits of the file's SHA-256>",
	// with "+bos" appended when AddBOS is set.
	Name() string
}

// Options tunes Load. The zero value is right for a tokenizer.json fed chat-templated prompts.
type Options struct {
	// AddBOS prepends the beginning-of-sequence token(s) of the file's post-processor (Llama-3:
	// <|begin_of_text|>, 128000) to every encoding, as Hugging Face's add_special_tokens=True does
	// for the leading part of the template. Off by default because engines usually apply a chat
	// template that already writes the BOS into the prompt text; adding it again would double it
	// and shift every block hash. Load fails if AddBOS is set and the file defines no BOS.
	AddBOS bool

	// Pattern is the pre-tokenizer regex for tiktoken files; default Llama3Pattern.
	// tokenizer.json files carry their own and must leave it empty.
	Pattern string

	// SpecialTokens are the added tokens of a tiktoken file (text → id), recognised in the text.
	// Default: the added_tokens_decoder of a tokenizer_config.json next to the file if there is
	// one, else, for a 128,000-token file with the default pattern, Llama-3's 256 special tokens
	// (<|begin_of_text|> = 128000 ... in Meta's order). tokenizer.json files must leave it nil.
	SpecialTokens map[string]uint32
}

// Load reads a tokenizer with default Options; see LoadWith.
func Load(path string) (Tokenizer, error) { return LoadWith(path, Options{}) }

// LoadWith reads a Hugging Face tokenizer.json holding a byte-level BPE model, or a tiktoken BPE
// file (lines of "base64-token rank"); the format is recognised from the content. path may also
// be a model directory: its tokenizer.json is used, else its tiktoken.model. Other tokenizers
// (WordPiece, Unigram, WordLevel, SentencePiece-style BPE, SentencePiece .model protobufs) are
// rejected with an error naming what was found.
func LoadWith(path string, opts Options) (Tokenizer, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = pickInDir(path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load %s: %w", path, err)
	}
	sum := sha256.Sum256(data)
	name := filepath.Base(path) + "@" + hex.EncodeToString(sum[:6])
	if opts.AddBOS {
		name += "+bos"
	}
	var t *bpeTokenizer
	if trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff"); len(trimmed) > 0 && trimmed[0] == '{' {
		t, err = loadHFJSON(data, opts)
	} else {
		t, err = loadTiktoken(data, filepath.Dir(path), opts)
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load %s: %w", path, err)
	}
	t.name = name
	return t, nil
}

// pickInDir chooses the tokenizer file of a model directory as engines do: tokenizer.json first.
// When neither file exists the tokenizer.json path is returned, so the error names it.
func pickInDir(dir string) string {
	for _, name := range []string{"tokenizer.json", "tiktoken.model"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	return filepath.Join(dir, "tokenizer.json")
}
