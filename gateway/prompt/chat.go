package prompt

import (
	"strings"

	"github.com/ardanlabs/jinja"
)

// chatRequest is a /v1/chat/completions body turned into what vLLM hands the chat template.
type chatRequest struct {
	vars renderVars
	// continueFinal is vLLM's continue_final_message: the render is cut after the last message's
	// text, as transformers does, so the model continues it.
	continueFinal bool
	// multimodal: a content part is not text (image, audio, video, file). The engine expands such
	// parts into placeholder tokens this package cannot predict, so the prompt is unknown.
	multimodal bool
}

// textPartKeys maps the text-like content part types vLLM accepts to the key holding the text.
var textPartKeys = map[string]string{
	"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking",
}

// parseChat reads messages, tools, documents, chat_template_kwargs, add_generation_prompt and
// continue_final_message, normalising messages as vLLM's parse_chat_messages does (see
// docs/API.md "Gateway: tokens for routing"):
//   - content: a string or a list of parts; text parts are joined with "\n" into a string, or,
//     when the template loops over content parts (openAIContent), kept as a list of
//     {"type": "text", "text": ...}; null content is "" (or []);
//   - kept per message: role, content, then tool_calls (assistant), reasoning and
//     reasoning_content (assistant, from "reasoning"), tool_call_id (tool), name (a string),
//     tools (developer); other keys are dropped;
//   - assistant tool_calls: an empty list is dropped; a function's "arguments" JSON string is
//     parsed into its value, empty or null arguments become {};
//   - tools become {"type", "function": {"name", "description", "parameters", ...}, ...} as
//     pydantic's model_dump writes them (description and parameters null when absent).
func parseChat(d *jinja.Dict, openAIContent bool) (chatRequest, error) {
	var cr chatRequest
	var err error
	if cr.vars.addGenerationPrompt, err = optBool(d, "add_generation_prompt", true); err != nil {
		return cr, err
	}
	if cr.continueFinal, err = optBool(d, "continue_final_message", false); err != nil {
		return cr, err
	}
	if cr.continueFinal && cr.vars.addGenerationPrompt {
		return cr, badRequest("continue_final_message and add_generation_prompt cannot both be true")
	}
	msgs := field(d, "messages")
	if !msgs.IsList() || msgs.AsList().Len() == 0 {
		return cr, badRequest("\"messages\" must be a non-empty array")
	}
	out := make([]jinja.Value, 0, msgs.AsList().Len())
	for i, m := range msgs.AsList().Items {
		msg, mm, err := parseMessage(m, i, openAIContent)
		if err != nil {
			return cr, err
		}
		cr.multimodal = cr.multimodal || mm
		out = append(out, msg)
	}
	cr.vars.messages = jinja.NewList(out)
	if cr.vars.tools, err = parseTools(field(d, "tools")); err != nil {
		return cr, err
	}
	cr.vars.documents = jinja.None()
	if docs := field(d, "documents"); !docs.IsUndefined() && !docs.IsNone() {
		if !docs.IsList() {
			return cr, badRequest("\"documents\" must be an array")
		}
		cr.vars.documents = docs
	}
	if kw := field(d, "chat_template_kwargs"); !kw.IsUndefined() && !kw.IsNone() {
		if !kw.IsDict() {
			return cr, badRequest("\"chat_template_kwargs\" must be an object")
		}
		cr.vars.kwargs = kw.AsDict()
	}
	return cr, nil
}

func parseMessage(m jinja.Value, i int, openAIContent bool) (jinja.Value, bool, error) {
	if !m.IsDict() {
		return jinja.Value{}, false, badRequest("messages[%d] must be an object", i)
	}
	src := m.AsDict()
	role := field(src, "role")
	if !role.IsString() {
		return jinja.Value{}, false, badRequest("messages[%d].role must be a string", i)
	}
	content, mm, err := parseContent(field(src, "content"), i, openAIContent)
	if err != nil {
		return jinja.Value{}, false, err
	}
	out := jinja.NewDict()
	msg := out.AsDict()
	msg.Set("role", role)
	msg.Set("content", content)
	switch role.AsString() {
	case "assistant":
		if tc := field(src, "tool_calls"); !tc.IsUndefined() && !tc.IsNone() {
			calls, err := parseToolCalls(tc, i)
			if err != nil {
				return jinja.Value{}, false, err
			}
			if calls.AsList().Len() > 0 {
				msg.Set("tool_calls", calls)
			}
		}
		if r := field(src, "reasoning"); !r.IsUndefined() && !r.IsNone() {
			msg.Set("reasoning", r)
			msg.Set("reasoning_content", r)
		}
	case "tool":
		if id, ok := src.Get("tool_call_id"); ok {
			msg.Set("tool_call_id", id)
		}
	}
	if name := field(src, "name"); name.IsString() {
		msg.Set("name", name)
	}
	if role.AsString() == "developer" {
		tools := field(src, "tools")
		if tools.IsUndefined() {
			tools = jinja.None()
		}
		msg.Set("tools", tools)
	}
	return out, mm, nil
}

// parseContent returns a message's content as the template sees it, and whether it holds
// non-text parts.
func parseContent(c jinja.Value, i int, openAIContent bool) (jinja.Value, bool, error) {
	var texts []string
	multimodal := false
	switch {
	case c.IsUndefined() || c.IsNone():
	case c.IsString():
		texts = append(texts, c.AsString())
	case c.IsList():
		for j, p := range c.AsList().Items {
			if p.IsString() {
				texts = append(texts, p.AsString())
				continue
			}
			if !p.IsDict() {
				return jinja.Value{}, false, badRequest("messages[%d].content[%d] must be a string or an object", i, j)
			}
			typ := field(p.AsDict(), "type")
			if !typ.IsString() {
				if p.AsDict().Has("text") {
					typ = jinja.NewString("text")
				} else {
					multimodal = true
					continue
				}
			}
			key, ok := textPartKeys[typ.AsString()]
			if !ok {
				multimodal = true
				continue
			}
			t := field(p.AsDict(), key)
			switch {
			case t.IsUndefined() || t.IsNone():
				continue // vLLM skips a text part without text
			case !t.IsString():
				return jinja.Value{}, false, badRequest("messages[%d].content[%d].%s must be a string", i, j, key)
			}
			texts = append(texts, t.AsString())
		}
	default:
		return jinja.Value{}, false, badRequest("messages[%d].content must be a string, an array of parts or null", i)
	}
	if openAIContent {
		parts := make([]jinja.Value, len(texts))
		for k, t := range texts {
			part := jinja.NewDict()
			part.AsDict().Set("type", jinja.NewString("text"))
			part.AsDict().Set("text", jinja.NewString(t))
			parts[k] = part
		}
		return jinja.NewList(parts), multimodal, nil
	}
	return jinja.NewString(strings.Join(texts, "\n")), multimodal, nil
}

func parseToolCalls(tc jinja.Value, i int) (jinja.Value, error) {
	if !tc.IsList() {
		return jinja.Value{}, badRequest("messages[%d].tool_calls must be an array", i)
	}
	for j, call := range tc.AsList().Items {
		if !call.IsDict() {
			return jinja.Value{}, badRequest("messages[%d].tool_calls[%d] must be an object", i, j)
		}
		fn := field(call.AsDict(), "function")
		if !fn.IsDict() {
			return jinja.Value{}, badRequest("messages[%d].tool_calls[%d].function must be an object", i, j)
		}
		args := field(fn.AsDict(), "arguments")
		switch {
		case !args.IsTruthy():
			fn.AsDict().Set("arguments", jinja.NewDict())
		case args.IsString():
			parsed, err := decodeJSON([]byte(args.AsString()))
			if err != nil {
				return jinja.Value{}, badRequest("messages[%d].tool_calls[%d].function.arguments is not valid JSON: %v", i, j, err)
			}
			fn.AsDict().Set("arguments", parsed)
		case args.IsDict() || args.IsList():
		default:
			return jinja.Value{}, badRequest("messages[%d].tool_calls[%d].function.arguments must be a JSON string", i, j)
		}
	}
	return tc, nil
}

// parseTools normalises "tools" (absent or null → None, as transformers passes it).
func parseTools(t jinja.Value) (jinja.Value, error) {
	if t.IsUndefined() || t.IsNone() {
		return jinja.None(), nil
	}
	if !t.IsList() {
		return jinja.Value{}, badRequest("\"tools\" must be an array")
	}
	out := make([]jinja.Value, 0, t.AsList().Len())
	for i, tool := range t.AsList().Items {
		if !tool.IsDict() {
			return jinja.Value{}, badRequest("tools[%d] must be an object", i)
		}
		src := tool.AsDict()
		fn := field(src, "function")
		if !fn.IsDict() || !field(fn.AsDict(), "name").IsString() {
			return jinja.Value{}, badRequest("tools[%d].function must be an object with a string \"name\"", i)
		}
		typ := field(src, "type")
		if typ.IsUndefined() {
			typ = jinja.NewString("function")
		}
		f := fn.AsDict()
		nf := jinja.NewDict()
		nf.AsDict().Set("name", field(f, "name"))
		for _, k := range []string{"description", "parameters"} {
			v := field(f, k)
			if v.IsUndefined() {
				v = jinja.None()
			}
			nf.AsDict().Set(k, v)
		}
		copyOtherKeys(nf.AsDict(), f)
		nt := jinja.NewDict()
		nt.AsDict().Set("type", typ)
		nt.AsDict().Set("function", nf)
		copyOtherKeys(nt.AsDict(), src)
		out = append(out, nt)
	}
	return jinja.NewList(out), nil
}

// copyOtherKeys appends src's keys that dst lacks, in src's order (pydantic's extra fields).
func copyOtherKeys(dst, src *jinja.Dict) {
	for _, k := range src.Keys {
		if !dst.Has(k) {
			dst.Set(k, src.Data[k])
		}
	}
}

// continueFinalMessage cuts rendered after the last occurrence of the final message's text
// (stripped), as transformers' apply_chat_template(continue_final_message=True) does.
func continueFinalMessage(rendered string, messages jinja.Value) (string, error) {
	items := messages.AsList().Items
	last := field(items[len(items)-1].AsDict(), "content")
	var final string
	switch {
	case last.IsString():
		final = last.AsString()
	case last.IsList():
		found := false
		for k := last.AsList().Len() - 1; k >= 0 && !found; k-- {
			if p := last.AsList().Items[k]; p.IsDict() && field(p.AsDict(), "text").IsString() {
				final, found = field(p.AsDict(), "text").AsString(), true
			}
		}
		if !found {
			return "", badRequest("continue_final_message: the final message has no text to continue")
		}
	}
	final = strings.TrimSpace(final)
	at := strings.LastIndex(rendered, final)
	if at < 0 {
		return "", badRequest("continue_final_message: the final message does not appear in the rendered chat")
	}
	return rendered[:at+len(final)], nil
}
