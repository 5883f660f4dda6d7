package traces

import (
	"strings"
	"testing"
)

func TestLoadMooncake(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 3000, "input_length": 512, "output_length": 1, "hash_ids": [0], "extra": true}` + "\n\n"
	reqs, err := LoadMooncake(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 {
		t.Fatalf("got %d requests", len(reqs))
	}
	want := Request{ArrivalMs: 3000, InputTokens: 512, OutputTokens: 1, HashIDs: []uint64{0}}
	if got := reqs[1]; got.ArrivalMs != want.ArrivalMs || got.InputTokens != 512 || got.OutputTokens != 1 ||
		len(got.HashIDs) != 1 || got.HashIDs[0] != 0 {
		t.Fatalf("got %+v", got)
	}
}

func TestLoadMooncakeErrors(t *testing.T) {
	good := `{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [7]}` + "\n"
	cases := map[string]string{
		"line 2: invalid character":              good + "{bad\n",
		"line 2: hash_ids has 1 ids, want ceil(": good + `{"timestamp": 1, "input_length": 513, "output_length": 1, "hash_ids": [7]}`,
		"line 1: input_length missing":           `{"timestamp": 1, "output_length": 1, "hash_ids": []}`,
		"line 1: hash_ids missing":               `{"timestamp": 1, "input_length": 0, "output_length": 1}`,
		"line 3: negative length":                good + "\n" + `{"timestamp": 1, "input_length": 1, "output_length": -1, "hash_ids": [1]}`,
		"line 1: bad timestamp":                  `{"timestamp": -2.5, "input_length": 0, "output_length": 1, "hash_ids": []}`,
		"line 1: json: cannot unmarshal":         `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [-1]}`,
	}
	for want, in := range cases {
		_, err := LoadMooncake(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "traces: read mooncake: ") {
			t.Errorf("input %q: err = %v, want it to contain %q", in, err, want)
		}
	}
}

func TestLoadMooncakeFractionalTimestamp(t *testing.T) {
	reqs, err := LoadMooncake(strings.NewReader(`{"timestamp": 12.6, "input_length": 0, "output_length": 1, "hash_ids": []}`))
	if err != nil || reqs[0].ArrivalMs != 13 {
		t.Fatalf("reqs %+v err %v", reqs, err)
	}
}

func TestLoadMooncakeConversationTrace(t *testing.T) {
	reqs, err := LoadMooncakeFile(MooncakeConversation)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 12031 {
		t.Fatalf("got %d requests, want 12031", len(reqs))
	}
	refs := 0
	for i, r := range reqs {
		refs += len(r.HashIDs)
		if i > 0 && r.ArrivalMs < reqs[i-1].ArrivalMs {
			t.Fatalf("request %d arrives before its predecessor", i)
		}
	}
	if refs != 288500 {
		t.Fatalf("block references %d, want 288500 (README)", refs)
	}
}

func TestLoadMooncakeFileMissing(t *testing.T) {
	_, err := LoadMooncakeFile("/nonexistent/trace.jsonl")
	if err == nil || !strings.HasPrefix(err.Error(), "traces: open mooncake trace: ") {
		t.Fatalf("err = %v", err)
	}
}
