// Package tokenizer turns a text prompt into the exact token ids an inference engine would compute,
// so that the router's block hashes (package blockhash) match the engine's KV-cache blocks.
//
// Supported: byte-level BPE vocabularies (Llama-3, GPT-2, Qwen, Cohere, DeepSeek style), read either
// from a Hugging Face tokenizer.json (model type "BPE" with a ByteLevel pre-tokenizer) or from a
// tiktoken BPE file (one "base64-token rank" pair per line, as Meta's original Llama-3
// tokenizer.model). Everything else — WordPiece, Unigram, WordLevel, SentencePiece-style BPE — is
// rejected at Load, because an approximate tokenisation would silently produce block hashes that
// never match.
//
// Encode follows Hugging Face's encode(text, add_special_tokens=False): added tokens written in the
// text (such as <|begin_of_text|> or <|eot_id|>, special or not) are recognised and mapped to their
// ids, and the post-processor's BOS is added only when Options.AddBOS asks for it, because chat
// templates already render it into the prompt text. (vLLM, for one, tokenises chat prompts without
// special tokens but raw /v1/completions prompts with them: a router serving both needs two
// tokenizers, one with AddBOS.)
//
// Limits, each chosen over a silent mismatch where possible:
//   - tokenizer.json components: normalizers NFC/NFD/NFKC/NFKD (or none) and pre-tokenizers Split
//     (behavior Isolated) and ByteLevel; anything else fails at Load. The post-processor matters
//     only with AddBOS: the leading special tokens of a TemplateProcessing, or Roberta/Bert's cls
//     (never the EOS/SEP after the text); Load fails if it yields none.
//   - Split patterns are Oniguruma regexes. The Llama-3 (cl100k), Qwen2 and GPT-2 patterns run on
//     hand-written matchers; others run on regexp2 (.NET syntax), with Oniguruma's class
//     intersection [X&&[^Y]] translated. Oniguruma-only syntax such as possessive quantifiers
//     fails at Load; nested classes outside an intersection would be misread.
//   - Character classes use Go's Unicode tables (Unicode 15), which may disagree with the engine's
//     on characters newer than that.
//   - Case folding in (?i:'s|...) follows Unicode (so "'ſ" is a contraction, as in Oniguruma) in
//     the hand-written matchers, ASCII only in regexp2.
//   - A tiktoken file carries no special tokens: they come from Options.SpecialTokens, else a
//     tokenizer_config.json beside the file, else (128,000-token file, default pattern) Llama-3.0's
//     names; Llama-3.1 renamed some reserved slots.
package tokenizer
