package prompt

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"

	"github.com/kvrouter/kvrouter/tokenizer/tokenizertest"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the Go renders")

// realTemplate is a real model's chat template used in the parity tests.
type realTemplate struct {
	name string
	// config returns the path of its tokenizer_config.json.
	config func(t *testing.T) string
}

// realTemplates: Meta's Llama-3 and Moonshot's Kimi-K2 are read from the Go module cache
// (tokenizertest; Meta's licence keeps them out of the repository); Qwen2.5 and Mistral are
// committed fixtures (testdata/templates/SOURCES.md).
var realTemplates = []realTemplate{
	{"llama3", func(t *testing.T) string {
		return tokenizertest.Path(t, "meta-llama-3-8b-instruct/tokenizer_config.json")
	}},
	{"kimi-k2", func(t *testing.T) string { return tokenizertest.Path(t, "kimi-k2-instruct/tokenizer_config.json") }},
	{"qwen2.5", func(*testing.T) string { return "testdata/templates/qwen2.5-instruct.tokenizer_config.json" }},
	{"mistral", func(*testing.T) string { return "testdata/templates/mistral-7b-instruct-v0.2.tokenizer_config.json" }},
	// Not a model's: the constructs real templates use that the four above do not (Llama-3.1's
	// tojson(indent=4), loop controls, slicing, filters); special tokens from the Mistral config.
	{"constructs", func(*testing.T) string { return "testdata/templates/constructs.jinja" }},
}

const weatherTool = `{"type": "function", "function": {"name": "get_weather", "description": "Weather at a place <now> & \"later\"",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City, e.g. Zürich"},
  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer", "minimum": 1, "maximum": 16},
  "threshold": {"type": "number", "default": 0.5, "exclusiveMinimum": 1e-05, "big": 12345678901234567.0}}, "required": ["city"]}}}`

// conversations are request bodies (the "messages" and friends of /v1/chat/completions).
var conversations = []struct{ name, body string }{
	{"user_hello", `{"messages": [{"role": "user", "content": "Hello!"}]}`},
	{"system_user", `{"messages": [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Who are you?"}]}`},
	{"multi_turn", `{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
	  {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "6"},
	  {"role": "user", "content": "Thanks!\nBye."}]}`},
	{"empty_system", `{"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "Hi"}]}`},
	{"unicode", `{"messages": [{"role": "user", "content": "héllo wörld — 日本語 😀 \u2028 \"quoted\" <b>&amp;</b> back\\slash\ttab \u0001\b\f\u007f end"}]}`},
	{"padded", `{"messages": [{"role": "user", "content": "  padded  \n"}, {"role": "assistant", "content": "\nok "}, {"role": "user", "content": "again"}]}`},
	{"content_parts", `{"messages": [{"role": "user", "content": [{"type": "text", "text": "first part"}, {"type": "text", "text": "second part"}]}]}`},
	{"no_generation_prompt", `{"add_generation_prompt": false, "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}`},
	{"tools_given", `{"tools": [` + weatherTool + `], "messages": [{"role": "user", "content": "Weather in Zürich?"}]}`},
	{"tools_with_system", `{"tools": [` + weatherTool + `, {"type": "function", "function": {"name": "now"}}],
	  "messages": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Time?"}]}`},
	{"tool_calls", `{"tools": [` + weatherTool + `], "messages": [{"role": "user", "content": "Weather in Zürich?"},
	  {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
	    "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\", \"days\": 2, \"threshold\": 1.0}"}}]},
	  {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21.5}"}, {"role": "user", "content": "And tomorrow?"}]}`},
	{"two_tool_results", `{"tools": [` + weatherTool + `], "messages": [{"role": "user", "content": "Compare Paris and Rome."},
	  {"role": "assistant", "content": "Checking.", "tool_calls": [
	    {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
	    {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]},
	  {"role": "tool", "tool_call_id": "a", "content": "sunny"}, {"role": "tool", "tool_call_id": "b", "content": "rain"}]}`},
	{"roles_not_alternating", `{"messages": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]}`},
	{"template_kwargs", `{"chat_template_kwargs": {"custom": "x"}, "messages": [{"role": "user", "content": "kw"}]}`},
}

// parityCase is one template × conversation render, by Go and by the oracle.
type parityCase struct {
	name   string
	source string
	vars   map[string]jinja.Value
	got    string // Go render, or "ERROR: " + message
}

func renderCases(t *testing.T) []parityCase {
	t.Helper()
	var cases []parityCase
	for _, rt := range realTemplates {
		tokenizerPath := ""
		if rt.name == "constructs" {
			// A bare template takes special tokens from the tokenizer_config.json beside the tokenizer.
			tokenizerPath = "testdata/templates/mistral-7b-instruct-v0.2.tokenizer_config.json/../x"
		}
		ct, err := loadChatTemplate(tokenizerPath, rt.config(t))
		if err != nil || ct == nil {
			t.Fatalf("%s: load template: %v", rt.name, err)
		}
		for _, conv := range conversations {
			d, err := parseBody([]byte(conv.body))
			if err != nil {
				t.Fatalf("%s: %v", conv.name, err)
			}
			cr, err := parseChat(d, ct.openAIContent)
			if err != nil {
				t.Fatalf("%s: %v", conv.name, err)
			}
			got, err := ct.render(cr.vars)
			if err != nil {
				var te *templateError
				if !asTemplateError(err, &te) {
					t.Fatalf("%s/%s: render: %v", rt.name, conv.name, err)
				}
				got = "ERROR: " + te.msg
			}
			cases = append(cases, parityCase{name: rt.name + "__" + conv.name, source: ct.source, vars: ct.data(cr.vars), got: got})
		}
	}
	return cases
}

// TestTemplateGolden compares the Go renders of every real template × conversation with the
// committed golden files (run with -update to rewrite them after checking the oracle agrees).
func TestTemplateGolden(t *testing.T) {
	cases := renderCases(t)
	for _, c := range cases {
		path := filepath.Join("testdata", "golden", c.name+".txt")
		if *update {
			if err := os.WriteFile(path, []byte(c.got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v (run go test -run TestTemplateGolden -update)", c.name, err)
			continue
		}
		if c.got != string(want) {
			t.Errorf("%s: render differs from %s\n got %q\nwant %q", c.name, path, c.got, want)
		}
	}
	t.Logf("%d templates × %d conversations = %d renders checked against golden files", len(realTemplates), len(conversations), len(cases))
}

// TestTemplateParityWithPython renders every case with Python's jinja2 configured as transformers
// does (testdata/oracle.py) and requires byte-identical output, errors included.
func TestTemplateParityWithPython(t *testing.T) {
	python := "/usr/bin/python3" // Debian's, with python3-jinja2 (scripts/test-setup.sh checks the same one)
	if p := os.Getenv("KVROUTER_PYTHON"); p != "" {
		python = p
	}
	if err := exec.Command(python, "-c", "import jinja2").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3-jinja2 is needed in CI (apt-get install python3-jinja2): %v", err)
		}
		t.Skipf("python3 with jinja2 not available (Debian package python3-jinja2): %v", err)
	}
	cases := renderCases(t)
	type in struct {
		Source string          `json:"source"`
		Vars   json.RawMessage `json:"vars"`
	}
	ins := make([]in, len(cases))
	for i, c := range cases {
		ins[i] = in{Source: c.source, Vars: varsJSON(t, c.vars)}
	}
	input, err := json.Marshal(ins)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "testdata/oracle.py")
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, stderr.String())
	}
	var outs []struct {
		Text  *string `json:"text"`
		Error *string `json:"error"`
	}
	if err := json.Unmarshal(out, &outs); err != nil || len(outs) != len(cases) {
		t.Fatalf("oracle output (%d of %d): %v", len(outs), len(cases), err)
	}
	for i, c := range cases {
		want := ""
		if outs[i].Error != nil {
			want = "ERROR: " + *outs[i].Error
		} else {
			want = *outs[i].Text
		}
		if c.got != want {
			t.Errorf("%s: Go and Python jinja2 differ\n    go %q\npython %q", c.name, c.got, want)
		}
	}
	t.Logf("%d renders identical to Python jinja2 (%d templates × %d conversations)", len(cases), len(realTemplates), len(conversations))
}

// varsJSON writes template variables as JSON for the oracle, keeping key order and the
// int/float distinction (Python's json.loads restores both).
func varsJSON(t *testing.T, vars map[string]jinja.Value) json.RawMessage {
	t.Helper()
	d := jinja.NewDict()
	for k, v := range vars {
		d.AsDict().Set(k, v)
	}
	var b strings.Builder
	if err := pyJSON(&b, d, -1, ", ", ": ", 0); err != nil {
		t.Fatal(err)
	}
	return json.RawMessage(b.String())
}
