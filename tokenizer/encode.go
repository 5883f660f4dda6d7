package tokenizer

import (
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
)

// ErrInvalidUTF8 is returned by Encode for text that is not UTF-8: Hugging Face tokenizers take a
// Python str, so the engine rejects such a request rather than tokenising it.
var ErrInvalidUTF8 = errors.New("tokenizer: encode: text is not valid UTF-8")

// bpeTokenizer is the Hugging Face encoding pipeline for byte-level BPE:
// added tokens on the raw text → normalizer → added tokens on the normalised text →
// pre-tokenizers → BPE per piece. All fields are read-only after Load.
type bpeTokenizer struct {
	name string
	// bos is what Encode prepends (prefix when Options.AddBOS, else nil); prefix is what
	// add_special_tokens=True would prepend, whatever the options (Segmenter.Prefix).
	bos, prefix []uint32
	// rawAdded holds added tokens matched before normalisation (normalized: false, the usual case
	// for special tokens); normAdded those matched in the normalised text (normalized: true).
	rawAdded, normAdded *addedMatcher
	norm                normalizer
	steps               []preStep
	model               *bpeModel
}

func (t *bpeTokenizer) Name() string { return t.name }

// encodeScratch holds per-call buffers; pooled since Encode runs concurrently.
type encodeScratch struct {
	bpe              bpeScratch
	piecesA, piecesB []string
}

var encodeScratchPool = sync.Pool{New: func() any { return new(encodeScratch) }}

func (t *bpeTokenizer) Encode(text string) ([]uint32, error) {
	if !validUTF8(text) {
		return nil, ErrInvalidUTF8
	}
	// About 4 bytes per token in English; over-allocating a little is cheaper than regrowing.
	ids := make([]uint32, 0, len(t.bos)+len(text)/3+1)
	ids = append(ids, t.bos...)
	sc := encodeScratchPool.Get().(*encodeScratch)
	defer encodeScratchPool.Put(sc)

	err := t.rawAdded.split(text, func(part string, tok *addedToken) error {
		if tok != nil {
			ids = append(ids, tok.id)
			return nil
		}
		var err error
		ids, err = t.appendSegment(ids, part, sc)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tokenizer: encode: %w", err)
	}
	return ids, nil
}

func validUTF8(s string) bool { return utf8.ValidString(s) }

// encodeText pre-tokenises a stretch of text free of added tokens and appends its BPE ids.
func (t *bpeTokenizer) encodeText(ids []uint32, s string, sc *encodeScratch) ([]uint32, error) {
	pieces := append(sc.piecesA[:0], s)
	spare := sc.piecesB[:0]
	for _, step := range t.steps {
		out, err := step.apply(pieces, spare[:0])
		if err != nil {
			return nil, err
		}
		pieces, spare = out, pieces
	}
	for _, p := range pieces {
		ids = t.model.encodePiece(ids, p, &sc.bpe)
	}
	// Keep the grown buffers for the next call, and drop every reference to this text.
	clear(pieces[:cap(pieces)])
	clear(spare[:cap(spare)])
	sc.piecesA, sc.piecesB = pieces[:0], spare[:0]
	return ids, nil
}
