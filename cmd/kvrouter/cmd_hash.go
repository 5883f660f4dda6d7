package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/kvrouter/kvrouter/blockhash"
)

func init() {
	register(command{name: "hash", summary: "print the local and sequence block hashes of a token sequence", run: runHash})
}

func runHash(_ context.Context, args []string) error {
	fs := newFlagSet("hash", "hash --block-size N [--lora NAME] --tokens 1,2,3,...")
	bs := fs.Int("block-size", 16, "KV block size in tokens (must equal the engine's)")
	lora := fs.String("lora", "", "LoRA adapter name (changes the local-hash seed); empty = base model")
	tokens := fs.String("tokens", "", "comma-separated token ids (a trailing partial block is not hashed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *bs <= 0 {
		return fmt.Errorf("--block-size must be > 0, got %d", *bs)
	}
	ids, err := parseTokens(*tokens)
	if err != nil {
		return fmt.Errorf("--tokens: %v", err)
	}
	local := blockhash.LocalHashes(nil, ids, *bs, blockhash.LoRASeed(*lora))
	seq := blockhash.Sequence(nil, local)
	if local == nil {
		local, seq = []uint64{}, []uint64{}
	}
	return json.NewEncoder(stdout).Encode(map[string][]uint64{"local": local, "seq": seq})
}
