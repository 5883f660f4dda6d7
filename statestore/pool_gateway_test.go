package statestore_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
)

// TestPoolGatewaySettings: the gateway's pool settings (models, tokenizer, chat template, tokenize
// mode) round-trip through both stores unchanged, and bad ones are rejected naming the setting.
func TestPoolGatewaySettings(t *testing.T) {
	stores := bothStores(t)
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			cfg := statestore.DefaultPoolConfig(16)
			cfg.Models = []string{"llama-3-8b", "llama-3-8b-instruct"}
			cfg.Tokenizer = "/models/llama/tokenizer.json"
			cfg.ChatTemplate = "/models/llama/tokenizer_config.json"
			cfg.Tokenize = statestore.TokenizeLocal
			cfg.ImageTokenID = 151655
			if err := st.PutPool(ctx, "gw", cfg); err != nil {
				t.Fatal(err)
			}
			cfg.Models[0] = "changed-by-caller" // the store keeps its own copy
			got, err := st.GetPool(ctx, "gw")
			if err != nil {
				t.Fatal(err)
			}
			want := statestore.DefaultPoolConfig(16)
			want.Models = []string{"llama-3-8b", "llama-3-8b-instruct"}
			want.Tokenizer, want.ChatTemplate, want.Tokenize = cfg.Tokenizer, cfg.ChatTemplate, cfg.Tokenize
			want.ImageTokenID = 151655
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v\nwant %+v", got, want)
			}
			if !got.ServesModel("llama-3-8b-instruct") || got.ServesModel("gpt-4") {
				t.Fatal("ServesModel")
			}
			// Clearing the settings clears them.
			if err := st.PutPool(ctx, "gw", statestore.DefaultPoolConfig(16)); err != nil {
				t.Fatal(err)
			}
			got, _ = st.GetPool(ctx, "gw")
			if !reflect.DeepEqual(got, statestore.DefaultPoolConfig(16)) || got.TokenizeMode() != statestore.TokenizeNone {
				t.Fatalf("after clearing: %+v", got)
			}
			for _, bad := range []statestore.PoolConfig{
				func() statestore.PoolConfig { c := statestore.DefaultPoolConfig(16); c.Models = []string{""}; return c }(),
				func() statestore.PoolConfig {
					c := statestore.DefaultPoolConfig(16)
					c.Models = []string{"a", "a"}
					return c
				}(),
				func() statestore.PoolConfig { c := statestore.DefaultPoolConfig(16); c.Tokenize = "magic"; return c }(),
				func() statestore.PoolConfig { c := statestore.DefaultPoolConfig(16); c.Tokenize = "local"; return c }(),
				func() statestore.PoolConfig { c := statestore.DefaultPoolConfig(16); c.ImageTokenID = -1; return c }(),
				func() statestore.PoolConfig {
					c := statestore.DefaultPoolConfig(16)
					c.ImageTokenID = 1 << 32
					return c
				}(),
			} {
				if err := st.PutPool(ctx, "gw", bad); !errors.Is(err, statestore.ErrInvalid) {
					t.Fatalf("PutPool(%+v) = %v, want ErrInvalid", bad, err)
				}
			}
		})
	}
}
