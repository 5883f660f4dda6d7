package tokenizer

import "fmt"

// Segmenter exposes how Encode decomposes a text, for callers that cache encodings (the gateway's
// chat prefix cache, package gateway/prompt). Every Tokenizer that Load returns implements it.
//
// Added tokens written in the text (matched before normalisation, as Hugging Face does) cut it
// into segments, and BPE never merges across an added token: the encoding of the text between two
// added tokens depends on that text alone. So, without the BOS,
//
//	Encode(text) == concat over Segments(text) of (added ? [id] : AppendSegment(nil, part))
//
// which TestSegmentsConcatenateToEncode checks on real vocabularies and random texts.
type Segmenter interface {
	Tokenizer
	// Segments calls emit for each part of text in order: an added token (added = true, with its
	// id; part is the matched text, including whitespace that lstrip/rstrip swallowed), or a
	// non-empty stretch of text between added tokens (added = false). It fails with ErrInvalidUTF8
	// as Encode does, and returns emit's first error.
	Segments(text string, emit func(part string, added bool, id uint32) error) error
	// AppendSegment appends the ids of a text part that Segments emitted with added = false.
	AppendSegment(dst []uint32, part string) ([]uint32, error)
	// Prefix returns the ids that Hugging Face's encode(text, add_special_tokens=True) puts before
	// the text: the post-processor's leading special tokens (Llama-3: [128000], <|begin_of_text|>),
	// or nil when the file's post-processor adds none (Qwen2's ByteLevel-only one). It does not
	// depend on Options.AddBOS. The caller must not modify the slice.
	Prefix() []uint32
}

var _ Segmenter = (*bpeTokenizer)(nil)

func (t *bpeTokenizer) Prefix() []uint32 { return t.prefix }

func (t *bpeTokenizer) Segments(text string, emit func(part string, added bool, id uint32) error) error {
	if !validUTF8(text) {
		return ErrInvalidUTF8
	}
	return t.rawAdded.split(text, func(part string, tok *addedToken) error {
		if tok != nil {
			return emit(part, true, tok.id)
		}
		return emit(part, false, 0)
	})
}

func (t *bpeTokenizer) AppendSegment(dst []uint32, part string) ([]uint32, error) {
	if !validUTF8(part) {
		return nil, ErrInvalidUTF8
	}
	sc := encodeScratchPool.Get().(*encodeScratch)
	defer encodeScratchPool.Put(sc)
	ids, err := t.appendSegment(dst, part, sc)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: encode: %w", err)
	}
	return ids, nil
}

// appendSegment encodes a stretch of text free of raw added tokens: normaliser, then the added
// tokens that match in normalised text, then pre-tokenisation and BPE.
func (t *bpeTokenizer) appendSegment(ids []uint32, part string, sc *encodeScratch) ([]uint32, error) {
	if len(t.norm) > 0 {
		part = t.norm.apply(part)
	}
	err := t.normAdded.split(part, func(sub string, tok *addedToken) error {
		if tok != nil {
			ids = append(ids, tok.id)
			return nil
		}
		var err error
		ids, err = t.encodeText(ids, sub, sc)
		return err
	})
	return ids, err
}
