package prompt

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"
)

// chatTemplate is a compiled chat template and the variables transformers passes with it.
type chatTemplate struct {
	path string
	// source is the default template's text as read (before the tojson rewrite).
	source string
	tmpl   *jinja.Template
	// toolTmpl is the "tool_use" template of a tokenizer_config.json that names several (nil if
	// none): transformers renders it when the request has tools.
	toolTmpl *jinja.Template
	// specials are the tokenizer's special tokens as transformers' special_tokens_map gives them
	// to the template (bos_token, eos_token, ..., additional_special_tokens), only those set.
	specials map[string]jinja.Value
	// openAIContent: the template loops over message content parts, so vLLM's "auto" content
	// format passes content as a list of {"type": "text", "text": ...} parts (else as a string).
	openAIContent bool
}

// specialTokenKeys are the special_tokens_map attributes of a transformers tokenizer.
var specialTokenKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// tojsonFilter matches the tojson filter in template source. The engine's tojson is
// transformers' (json.dumps with ensure_ascii=False, key order kept, Python float repr); the
// jinja package's differs on floats and a few escapes, and its filters cannot be replaced, so
// the source is rewritten to call pyTojsonName, a callable the render passes as a variable.
var tojsonFilter = regexp.MustCompile(`\|\s*tojson\b`)

const pyTojsonName = "kvrouter_tojson"

// openAIContentLoop recognises a loop over a message's content parts, vLLM's signal for the
// "openai" content format (its detector walks the Jinja AST; this looks at the source).
var openAIContentLoop = regexp.MustCompile(`for\s+\w+\s+in\s+\w+\s*(\[\s*['"]content['"]\s*\]|\.content\b)`)

// loadChatTemplate reads the template of a pool: templatePath when set (a tokenizer_config.json
// whose "chat_template" is used, or a bare template file), else beside the tokenizer file:
// chat_template.jinja when present (newer Hugging Face repositories), else tokenizer_config.json's
// "chat_template". Special tokens come from the tokenizer_config.json that holds the template, else
// the one beside the tokenizer. It returns (nil, nil) when no template is configured or found.
func loadChatTemplate(tokenizerPath, templatePath string) (*chatTemplate, error) {
	dir := filepath.Dir(tokenizerPath)
	if tokenizerPath != "" {
		if st, err := os.Stat(tokenizerPath); err == nil && st.IsDir() {
			dir = tokenizerPath
		}
	}
	besideConfig := ""
	if tokenizerPath != "" {
		if p := filepath.Join(dir, "tokenizer_config.json"); fileExists(p) {
			besideConfig = p
		}
	}
	var source, configPath, origin string
	var named map[string]string
	switch {
	case templatePath != "":
		data, err := os.ReadFile(templatePath)
		if err != nil {
			return nil, fmt.Errorf("prompt: chat template %s: %w", templatePath, err)
		}
		origin = templatePath
		if trimmed := strings.TrimSpace(string(data)); strings.HasPrefix(trimmed, "{") && json.Valid(data) {
			configPath = templatePath
			if source, named, err = configTemplate(data); err != nil {
				return nil, fmt.Errorf("prompt: chat template %s: %w", templatePath, err)
			}
		} else {
			source, configPath = string(data), besideConfig
		}
	case tokenizerPath == "":
		return nil, nil
	case fileExists(filepath.Join(dir, "chat_template.jinja")):
		origin = filepath.Join(dir, "chat_template.jinja")
		data, err := os.ReadFile(origin)
		if err != nil {
			return nil, fmt.Errorf("prompt: chat template %s: %w", origin, err)
		}
		source, configPath = string(data), besideConfig
	case besideConfig != "":
		data, err := os.ReadFile(besideConfig)
		if err != nil {
			return nil, fmt.Errorf("prompt: chat template %s: %w", besideConfig, err)
		}
		origin, configPath = besideConfig, besideConfig
		if source, named, err = configTemplate(data); err != nil {
			return nil, fmt.Errorf("prompt: chat template %s: %w", besideConfig, err)
		}
	default:
		return nil, nil
	}
	if source == "" && named == nil {
		return nil, nil
	}
	ct := &chatTemplate{path: origin, specials: map[string]jinja.Value{}}
	if configPath != "" {
		data, err := os.ReadFile(configPath)
		if err != nil {
			return nil, fmt.Errorf("prompt: tokenizer config %s: %w", configPath, err)
		}
		if ct.specials, err = specialTokens(data); err != nil {
			return nil, fmt.Errorf("prompt: tokenizer config %s: %w", configPath, err)
		}
	}
	if named != nil {
		source = named["default"]
		if tool, ok := named["tool_use"]; ok {
			t, err := compileTemplate(tool)
			if err != nil {
				return nil, fmt.Errorf("prompt: chat template %s (tool_use): %w", origin, err)
			}
			ct.toolTmpl = t
		}
		if source == "" && ct.toolTmpl == nil {
			return nil, fmt.Errorf("prompt: chat template %s: the named templates hold neither \"default\" nor \"tool_use\"", origin)
		}
	}
	if source != "" {
		t, err := compileTemplate(source)
		if err != nil {
			return nil, fmt.Errorf("prompt: chat template %s: %w", origin, err)
		}
		ct.tmpl = t
	}
	ct.source = source
	ct.openAIContent = openAIContentLoop.MatchString(source) || (named != nil && openAIContentLoop.MatchString(named["tool_use"]))
	return ct, nil
}

func compileTemplate(source string) (*jinja.Template, error) {
	return jinja.Compile(tojsonFilter.ReplaceAllString(source, "| "+pyTojsonName))
}

// configTemplate returns the "chat_template" of a tokenizer_config.json: a string, or a list of
// {"name", "template"} (returned as named, by name).
func configTemplate(data []byte) (string, map[string]string, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", nil, err
	}
	if isNullJSON(cfg.ChatTemplate) {
		return "", nil, nil
	}
	var s string
	if json.Unmarshal(cfg.ChatTemplate, &s) == nil {
		return s, nil, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(cfg.ChatTemplate, &list); err != nil {
		return "", nil, fmt.Errorf("chat_template is neither a string nor a list of named templates: %w", err)
	}
	named := make(map[string]string, len(list))
	for _, t := range list {
		named[t.Name] = t.Template
	}
	return "", named, nil
}

// specialTokens reads a tokenizer_config.json's special tokens: each a string or an AddedToken
// object {"content": ...}; null or absent ones are left out, as in special_tokens_map.
func specialTokens(data []byte) (map[string]jinja.Value, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	out := map[string]jinja.Value{}
	for _, k := range specialTokenKeys {
		s, ok, err := tokenText(raw[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if ok {
			out[k] = jinja.NewString(s)
		}
	}
	if r := raw["additional_special_tokens"]; !isNullJSON(r) {
		var list []json.RawMessage
		if err := json.Unmarshal(r, &list); err != nil {
			return nil, fmt.Errorf("additional_special_tokens: %w", err)
		}
		items := make([]jinja.Value, 0, len(list))
		for _, e := range list {
			s, ok, err := tokenText(e)
			if err != nil {
				return nil, fmt.Errorf("additional_special_tokens: %w", err)
			}
			if ok {
				items = append(items, jinja.NewString(s))
			}
		}
		out["additional_special_tokens"] = jinja.NewList(items)
	}
	return out, nil
}

func tokenText(raw json.RawMessage) (string, bool, error) {
	if isNullJSON(raw) {
		return "", false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", false, errors.New("neither a string nor an AddedToken object with \"content\"")
	}
	return *obj.Content, true, nil
}

func isNullJSON(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// renderVars are the variables of one render, in transformers' precedence: special tokens, then
// chat_template_kwargs, then messages, tools, documents and add_generation_prompt.
type renderVars struct {
	messages            jinja.Value
	tools               jinja.Value // None when the request has none (transformers passes tools=None)
	documents           jinja.Value // None likewise
	addGenerationPrompt bool
	kwargs              *jinja.Dict // chat_template_kwargs, or nil
}

// templateError is an error the template raised on purpose (raise_exception): the conversation
// breaks the model's rules (say, roles that do not alternate). The engine answers 400 to it.
type templateError struct{ msg string }

func (e *templateError) Error() string { return "chat template: " + e.msg }
func (e *templateError) Unwrap() error { return ErrBadRequest }

func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	msg := "raise_exception called"
	if len(args) > 0 && args[0].IsString() {
		msg = args[0].AsString()
	}
	return jinja.Undefined(), &templateError{msg: msg}
}

// pyTojson is transformers' tojson filter: json.dumps(x, ensure_ascii=False, indent=indent,
// separators=separators, sort_keys=sort_keys).
func pyTojson(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: no value")
	}
	indent, itemSep, keySep := -1, ", ", ": "
	if v, ok := kwargs["indent"]; ok && v.IsInt() {
		indent, itemSep = int(v.AsInt()), ","
	}
	if len(args) > 1 && args[1].IsInt() { // tojson(2): indent given positionally
		indent, itemSep = int(args[1].AsInt()), ","
	}
	if v, ok := kwargs["separators"]; ok && v.IsList() && v.AsList().Len() == 2 {
		items := v.AsList().Items
		if items[0].IsString() && items[1].IsString() {
			itemSep, keySep = items[0].AsString(), items[1].AsString()
		}
	}
	val := args[0]
	if v, ok := kwargs["sort_keys"]; ok && v.IsTruthy() {
		val = sortedKeys(val)
	}
	var b strings.Builder
	if err := pyJSON(&b, val, indent, itemSep, keySep, 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}

// sortedKeys returns a copy of v whose dicts list their keys in sorted order (json.dumps
// sort_keys=True).
func sortedKeys(v jinja.Value) jinja.Value {
	switch {
	case v.IsList():
		items := make([]jinja.Value, v.AsList().Len())
		for i, it := range v.AsList().Items {
			items[i] = sortedKeys(it)
		}
		return jinja.NewList(items)
	case v.IsDict():
		d := v.AsDict()
		keys := append([]string(nil), d.Keys...)
		slices.Sort(keys)
		out := jinja.NewDict()
		for _, k := range keys {
			out.AsDict().Set(k, sortedKeys(d.Data[k]))
		}
		return out
	}
	return v
}

// data returns the template variables of a render, without the callables render adds.
func (ct *chatTemplate) data(v renderVars) map[string]jinja.Value {
	data := make(map[string]jinja.Value, len(ct.specials)+8)
	for k, s := range ct.specials {
		data[k] = s
	}
	if v.kwargs != nil {
		for _, k := range v.kwargs.Keys {
			data[k] = v.kwargs.Data[k]
		}
	}
	data["messages"] = v.messages
	data["tools"] = v.tools
	data["documents"] = v.documents
	data["add_generation_prompt"] = jinja.NewBool(v.addGenerationPrompt)
	return data
}

// render runs the template (the tool_use one when the request has tools and the file names one).
func (ct *chatTemplate) render(v renderVars) (string, error) {
	tmpl := ct.tmpl
	if ct.toolTmpl != nil && (tmpl == nil || !v.tools.IsNone()) {
		tmpl = ct.toolTmpl
	}
	data := ct.data(v)
	data["raise_exception"] = jinja.NewCallable("raise_exception", raiseException)
	data[pyTojsonName] = jinja.NewCallable("tojson", pyTojson)
	out, err := tmpl.RenderValues(data)
	if err != nil {
		var te *templateError
		if errors.As(err, &te) {
			return "", te
		}
		return "", fmt.Errorf("%w: %s: %v", ErrTemplate, ct.path, err)
	}
	return out, nil
}
