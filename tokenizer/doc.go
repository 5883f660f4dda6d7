// Package tokenizer turns a text prompt into the exact token ids an inference engine would compute,
// so that the router's block hashes (package blockhash) match the engine's KV-cache blocks.
//
// Supported: byte-level BPE vocabularies (Llama-3, GPT-2, Qwen, Cohere style), read either from a
// Hugging Face tokenizer.json (model type "BPE" with a ByteLevel pre-tokenizer) or from a tiktoken
// BPE file (one "base64-token rank" pair per line, as Meta's original Llama-3 tokenizer.model).
// Everything else — WordPiece, Unigram, WordLevel and SentencePiece-style BPE — is rejected at Load,
// because an approximate tokenisation would silently produce block hashes that never match.
//
// Encode follows Hugging Face's encode(text, add_special_tokens=False): added tokens (such as
// <|begin_of_text|> or <|eot_id|>) written in the text are recognised and mapped to their ids, and
// the post-processor's BOS is added only when Options.AddBOS asks for it, because chat templates
// already render it into the prompt text.
package tokenizer
