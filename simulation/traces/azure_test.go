package traces

import (
	"strings"
	"testing"
)

func TestLoadAzure(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:15:46.6805900,374,44\n" +
		"2023-11-16 18:15:50.9951690,396,109\n" +
		"2023-11-16 18:16:46,1,2\n"
	reqs, err := LoadAzure(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{{0, 374, 44, nil, 0}, {4315, 396, 109, nil, 0}, {59319, 1, 2, nil, 0}}
	if len(reqs) != len(want) {
		t.Fatalf("got %d requests", len(reqs))
	}
	for i := range want {
		if reqs[i].ArrivalMs != want[i].ArrivalMs || reqs[i].InputTokens != want[i].InputTokens ||
			reqs[i].OutputTokens != want[i].OutputTokens || reqs[i].HashIDs != nil {
			t.Errorf("request %d = %+v, want %+v", i, reqs[i], want[i])
		}
	}
}

func TestLoadAzureReorderedColumns(t *testing.T) {
	in := "GeneratedTokens,timestamp,ContextTokens\r\n7,2023-11-16 18:15:46.5,9\r\n"
	reqs, err := LoadAzure(strings.NewReader(in))
	if err != nil || len(reqs) != 1 || reqs[0].InputTokens != 9 || reqs[0].OutputTokens != 7 {
		t.Fatalf("reqs %+v err %v", reqs, err)
	}
}

func TestLoadAzureErrors(t *testing.T) {
	h := "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	cases := map[string]string{
		"empty file":                         "",
		"want columns TIMESTAMP":             "TIMESTAMP,Context,GeneratedTokens\n",
		"line 3: bad ContextTokens":          h + "2023-11-16 18:15:46.1,1,1\n2023-11-16 18:15:47.1,x,1\n",
		"line 2: bad TIMESTAMP":              h + "yesterday,1,1\n",
		"line 2: bad GeneratedTokens":        h + "2023-11-16 18:15:46.1,1,-4\n",
		"line 3: timestamp 2023-11-16 18:15": h + "2023-11-16 18:15:46.1,1,1\n2023-11-16 18:15:45.1,1,1\n",
		"line 2: 2 fields":                   h + "2023-11-16 18:15:46.1,1\n",
	}
	for want, in := range cases {
		_, err := LoadAzure(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "traces: read azure: ") {
			t.Errorf("input %q: err = %v, want it to contain %q", in, err, want)
		}
	}
}

// azureSample is the first 500 requests of the Azure conversation trace, gzip-compressed (see
// testdata/README.md).
const azureSample = "testdata/azure_conv_first500.csv.gz"

func TestLoadAzureFileGzipSample(t *testing.T) {
	reqs, err := LoadAzureFile(azureSample)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 500 {
		t.Fatalf("%d requests, want 500", len(reqs))
	}
	// First and last rows: 18:15:46.6805900,374,44 and 18:17:55.6930640,1033,420.
	first, last := reqs[0], reqs[len(reqs)-1]
	if first.ArrivalMs != 0 || first.InputTokens != 374 || first.OutputTokens != 44 {
		t.Errorf("first request %+v", first)
	}
	if last.ArrivalMs != 129012 || last.InputTokens != 1033 || last.OutputTokens != 420 {
		t.Errorf("last request %+v, want arrival 129012 ms, 1033 in, 420 out", last)
	}
}
