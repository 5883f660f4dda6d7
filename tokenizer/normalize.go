package tokenizer

import "golang.org/x/text/unicode/norm"

// normalizer is a Unicode normalisation form, or a sequence of them. Byte-level BPE files use at
// most NFC (Qwen2, Cohere); other Hugging Face normalizers are rejected at Load.
type normalizer []norm.Form

func (n normalizer) apply(s string) string {
	for _, f := range n {
		if !f.IsNormalString(s) {
			s = f.String(s)
		}
	}
	return s
}
