package eventlog

import (
	"context"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// Query answers an overlap query on pool: the matched prefix depth of every (worker, dp_rank) holding
// at least the first block of the query, given by its local block hashes (SPEC §5).
func Query(ctx context.Context, st statestore.Store, pool string, local []uint64) ([]statestore.Score, error) {
	scores, err := st.Overlap(ctx, pool, blockhash.Sequence(nil, local), time.Now().UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("overlap: %w", err)
	}
	return scores, nil
}

// LocalHashes cuts token ids into blockSize-token blocks (a trailing partial block is dropped) and
// returns their local hashes for the base model.
func LocalHashes(tokens []uint32, blockSize int) []uint64 {
	return blockhash.LocalHashes(nil, tokens, blockSize, blockhash.LoRASeed(""))
}
