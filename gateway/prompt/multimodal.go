package prompt

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/kvrouter/kvrouter/blockhash"
)

// Multimodal chat requests (docs/API.md "Gateway: multimodal requests"). An image expands to a run of
// placeholder tokens that is the same for every image, so routing on tokens alone would match one
// image's blocks to another's. The gateway therefore assigns each image its identity
// (blockhash.MMIdentifier: a SHA-256 of the client's uuid, of a data URI's bytes, or of the URL),
// writes it into the forwarded body as the content part's "uuid" (vLLM's per-part multi_modal_uuids),
// so the engine names the item by it in BlockStored extra_keys, and folds the same identity into the
// blocks each image's placeholder run covers. The run is found in the engine's own /tokenize answer:
// the maximal runs of the pool's image_token_id, one per image in prompt order.

// chatMedia is what a chat body's content parts hold besides text.
type chatMedia struct {
	images []chatImage
	// other: audio, video, embeddings or an unknown part type: the gateway cannot place those.
	other bool
}

// chatImage is one image content part: its URL (http(s) or data URI; "" when only a uuid is given)
// and the client's uuid ("" when none).
type chatImage struct{ url, uuid string }

// imagePartTypes are the content part types vLLM reads as one image from "image_url" ("input_image"
// is the Responses API's spelling; a part with no "type" but an "image_url" key is an image too).
var imagePartTypes = map[string]bool{"image_url": true, "input_image": true}

// rawPart is one content part with its keys still raw, so a rewrite keeps every value byte for byte.
type rawPart = map[string]json.RawMessage

// scanChatMedia lists the body's images in prompt order (messages in order, parts in order).
func scanChatMedia(body []byte) (chatMedia, error) {
	var m chatMedia
	_, err := forEachPart(body, func(p rawPart) (bool, error) {
		img, isImage, isText := classifyPart(p)
		switch {
		case isImage:
			m.images = append(m.images, img)
		case !isText:
			m.other = true
		}
		return false, nil
	})
	return m, err
}

// forEachPart calls fn on every content part that is an object; when fn reports a change for any
// part, forEachPart returns the body re-encoded with the changed parts (else nil). Keys are written
// in Go's sorted order: JSON readers do not depend on key order.
func forEachPart(body []byte, fn func(rawPart) (bool, error)) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, badRequest("%v", err)
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(top["messages"], &msgs); err != nil {
		return nil, badRequest("\"messages\": %v", err)
	}
	changed := false
	for _, msg := range msgs {
		c := bytes.TrimSpace(msg["content"])
		if len(c) == 0 || c[0] != '[' {
			continue
		}
		var parts []json.RawMessage
		if err := json.Unmarshal(c, &parts); err != nil {
			return nil, badRequest("content: %v", err)
		}
		partChanged := false
		for i, raw := range parts {
			var p rawPart
			if json.Unmarshal(raw, &p) != nil || p == nil {
				continue // a string part: text
			}
			ch, err := fn(p)
			if err != nil {
				return nil, err
			}
			if ch {
				if parts[i], err = marshalJSON(p); err != nil {
					return nil, err
				}
				partChanged = true
			}
		}
		if partChanged {
			var err error
			if msg["content"], err = marshalJSON(parts); err != nil {
				return nil, err
			}
			changed = true
		}
	}
	if !changed {
		return nil, nil
	}
	var err error
	if top["messages"], err = marshalJSON(msgs); err != nil {
		return nil, err
	}
	return marshalJSON(top)
}

// marshalJSON is json.Marshal without HTML escaping, so strings keep their bytes ("<" stays "<").
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// classifyPart tells an image part (with its URL and uuid) and a text part apart from the rest.
func classifyPart(p rawPart) (img chatImage, isImage, isText bool) {
	var typ string
	_ = json.Unmarshal(p["type"], &typ)
	if _, ok := textPartKeys[typ]; ok || (typ == "" && p["text"] != nil) {
		return img, false, true
	}
	if !imagePartTypes[typ] && !(typ == "" && p["image_url"] != nil) {
		return img, false, false
	}
	_ = json.Unmarshal(p["uuid"], &img.uuid)
	// "image_url" is {"url": …} (OpenAI) or a bare string (vLLM's simple form, the Responses API).
	if json.Unmarshal(p["image_url"], &img.url) != nil {
		var u struct {
			URL string `json:"url"`
		}
		_ = json.Unmarshal(p["image_url"], &u)
		img.url = u.URL
	}
	return img, true, false
}

// assignImageUUIDs returns the body with every image part's "uuid" set to the identifier the router
// assigns (blockhash.MMIdentifier), and those identifiers in prompt order.
func assignImageUUIDs(body []byte) ([]byte, []string, error) {
	var ids []string
	out, err := forEachPart(body, func(p rawPart) (bool, error) {
		img, isImage, _ := classifyPart(p)
		if !isImage {
			return false, nil
		}
		id := blockhash.MMIdentifier(img.url, img.uuid)
		ids = append(ids, id)
		q, err := marshalJSON(id)
		p["uuid"] = q
		return true, err
	})
	return out, ids, err
}

// placeholderRuns returns the maximal runs of tok in ids as (offset, length) items.
func placeholderRuns(ids []uint32, tok uint32) []blockhash.MMItem {
	var runs []blockhash.MMItem
	for i := 0; i < len(ids); i++ {
		if ids[i] != tok {
			continue
		}
		j := i
		for j < len(ids) && ids[j] == tok {
			j++
		}
		runs = append(runs, blockhash.MMItem{Offset: i, Length: j - i})
		i = j
	}
	return runs
}

// engineChat resolves a chat body with tokenize "engine". Text-only bodies are sent to /tokenize as
// they are. With images, the body gets the router's image uuids (Result.Body) and the images' spans
// (Result.MMItems) come from the answer; when they cannot be placed exactly — no image_token_id, not
// one run per image, other media, or mm_processor_kwargs (vLLM then hashes the uuid with the kwargs,
// so the engine's identifier is not the router's) — the request routes by load only.
func (r *Resolver) engineChat(ctx context.Context, req Request, model string, mm bool) (Result, error) {
	body := req.Body
	var ids []string
	if mm {
		media, err := scanChatMedia(body)
		if err != nil {
			return unknown, err
		}
		if len(media.images) == 0 || media.other {
			return unknown, nil
		}
		if body, ids, err = assignImageUUIDs(body); err != nil {
			return unknown, err
		}
		if req.Config.ImageTokenID == 0 || hasProcessorKwargs(body) {
			return Result{Source: SourceNone, Body: body}, nil
		}
	}
	tr, err := engineChatRequest(body, model)
	if err != nil {
		return unknown, err
	}
	toks, err := r.engineTokens(ctx, req.Pool, req.EngineURL, tr)
	if !mm {
		return known(toks, SourceEngine, err)
	}
	if err != nil {
		return Result{Source: SourceNone, Body: body}, err // the uuids are forwarded all the same
	}
	runs := placeholderRuns(toks, uint32(req.Config.ImageTokenID))
	if len(runs) != len(ids) {
		return Result{Source: SourceNone, Body: body}, nil
	}
	for i := range runs {
		runs[i].Hash = blockhash.MMIdentifierHash(ids[i])
	}
	return Result{Tokens: toks, Known: true, Source: SourceEngine, MMItems: runs, Body: body}, nil
}

// hasProcessorKwargs reports a non-null "mm_processor_kwargs" in the body.
func hasProcessorKwargs(body []byte) bool {
	var top struct {
		Kwargs json.RawMessage `json:"mm_processor_kwargs"`
	}
	return json.Unmarshal(body, &top) == nil && !isNullJSON(top.Kwargs)
}
