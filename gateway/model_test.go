package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

// modelByStdlib is what encoding/json makes of the body's "model".
func modelByStdlib(body []byte) (string, bool, bool) {
	var h struct {
		Model *string `json:"model"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return "", false, false
	}
	if h.Model == nil {
		return "", false, true
	}
	return *h.Model, true, true
}

func TestModelField(t *testing.T) {
	for _, c := range []struct {
		body  string
		model string
		found bool
		bad   bool
	}{
		{`{"model":"m"}`, "m", true, false},
		{` { "messages" : [ {"role":"user","content":"a \"model\": \"x\" {[}"} ] , "model" : "llama-3" } `, "llama-3", true, false},
		{`{"prompt":[1,2,3],"stream":true,"max_tokens":7,"model":"a\u00e9b"}`, "aéb", true, false},
		{`{"model":"first","model":"last"}`, "last", true, false},
		{`{"mod\u0065l":"escaped"}`, "escaped", true, false},
		{`{"modEl":"folded"}`, "folded", true, false},
		{`{"model":"a","MODEL":"b"}`, "b", true, false},
		{`{"MOD\u0045L":"both"}`, "both", true, false},
		{`{"models":"no"}`, "", false, false},
		{`{"model":null}`, "", false, false},
		{`{"messages":[]}`, "", false, false},
		{`{}`, "", false, false},
		{`{"model":7}`, "", false, true},
		{`{"model":{"x":1}}`, "", false, true},
		{`{"model":"m"`, "", false, true},
		{`{"model":"m"} x`, "", false, true},
		{`["model","m"]`, "", false, true},
		{`{"a":[1,2}`, "", false, true},
		{``, "", false, true},
	} {
		m, found, err := modelField([]byte(c.body))
		if (err != nil) != c.bad || m != c.model || found != c.found {
			t.Errorf("%s: got %q %v %v, want %q %v bad=%v", c.body, m, found, err, c.model, c.found, c.bad)
		}
	}
}

// FuzzModelField: on every body encoding/json accepts as an object with a string or absent model, the scan
// finds the same model.
func FuzzModelField(f *testing.F) {
	for _, s := range []string{`{"model":"m"}`, `{"messages":[{"content":"x"}],"model":"y"}`, `{"a":{"model":"no"},"model":"yes"}`,
		`{"model":"a\\"b"}`, `{"x":"\\\\","model":"z"}`, `{"modEl":"f"}`, `{"model":"a","MODEL":"b"}`, `{"MOD\\u0045L":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		want, wantFound, ok := modelByStdlib(body)
		if !ok {
			return
		}
		got, found, err := modelField(body)
		if err != nil || got != want || found != wantFound {
			t.Fatalf("%q: scan %q %v %v, encoding/json %q %v", body, got, found, err, want, wantFound)
		}
	})
}

// BenchmarkModelField: a 72 KB, 40-message chat body whose "model" comes last (openai-go's field order).
func BenchmarkModelField(b *testing.B) {
	msg := `{"role":"user","content":"` + strings.Repeat("hello world, this is a fairly long message. ", 40) + `"}`
	body := []byte(`{"messages":[` + strings.Repeat(msg+",", 39) + msg + `],"model":"m","stream":true}`)
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		if m, _, err := modelField(body); err != nil || m != "m" {
			b.Fatal(m, err)
		}
	}
}
