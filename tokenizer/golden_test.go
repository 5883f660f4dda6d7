package tokenizer

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// Golden ids produced by Hugging Face tokenizers (or by engines using it) and published elsewhere;
// each case says where it comes from. Only ids are committed, never vocabulary files.

const llamaChatPrompt = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n" +
	"What is artificial intelligence?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"

// llamaChatIDs: vLLM's RequestOutput.prompt_token_ids for llamaChatPrompt with Llama-3-8B-Instruct,
// less the leading 128000 vLLM adds itself (it tokenised with add_special_tokens=True, so the
// output begins 128000, 128000 — the doubled BOS that Options.AddBOS defaults off to avoid).
var llamaChatIDs = []uint32{128000, 128006, 882, 128007, 271, 3923, 374, 21075, 11478, 30, 128009,
	128006, 78191, 128007, 271}

const llamaPiratePrompt = "<|start_header_id|>system<|end_header_id|>\n\n" +
	"You are a friendly chatbot who always responds in the style of a pirate<|eot_id|>" +
	"<|start_header_id|>user<|end_header_id|>\n\n" +
	"How many helicopters can a human eat in one sitting?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"

// llamaPirateIDsWithBOS: the expected encoding of llamaPiratePrompt with the BOS added, from
// jlama's Llama-3-8B-Instruct prompt test. (That test's text ends the system message with a
// period its ids lack — 55066 " pirate" is followed by 128009 — so the text here has none.)
var llamaPirateIDsWithBOS = []uint32{128000, 128006, 9125, 128007, 271, 2675, 527, 264, 11919, 6369,
	6465, 889, 2744, 31680, 304, 279, 1742, 315, 264, 55066, 128009, 128006, 882, 128007, 271, 4438,
	1690, 59432, 649, 264, 3823, 8343, 304, 832, 11961, 30, 128009, 128006, 78191, 128007, 271}

// llama31ToolsIDs: jlama's expected encoding of a Llama-3.1 tool-calling prompt (dates, JSON
// schema, quotes, "e.g.,"); Llama-3.1 shares Llama-3's vocabulary and these special ids. Only the
// ids were published: the text is recovered by decoding, and must re-encode to the same ids.
var llama31ToolsIDs = []uint32{128006, 9125, 128007, 271, 13013, 25, 6125, 27993, 198, 38766, 1303,
	33025, 2696, 25, 6790, 220, 2366, 18, 198, 15724, 2696, 25, 220, 1627, 10263, 220, 2366, 19, 271,
	2675, 2744, 6013, 439, 264, 55066, 128009, 128006, 882, 128007, 271, 22818, 279, 2768, 5865, 11,
	4587, 6013, 449, 264, 4823, 369, 264, 734, 1650, 449, 1202, 6300, 6105, 430, 1888, 11503, 279,
	2728, 10137, 382, 66454, 304, 279, 3645, 5324, 609, 794, 734, 836, 11, 330, 14105, 794, 11240, 315,
	5811, 836, 323, 1202, 907, 7966, 5519, 539, 1005, 7482, 382, 5018, 1337, 794, 330, 1723, 498, 330,
	1723, 794, 5324, 609, 794, 330, 456, 54625, 498, 330, 4789, 794, 330, 14354, 24031, 3794, 279, 1510,
	9499, 520, 264, 3813, 10684, 330, 14105, 794, 5324, 1337, 794, 330, 1735, 498, 330, 13495, 794,
	5324, 2588, 794, 5324, 1337, 794, 330, 928, 498, 330, 4789, 794, 330, 791, 3813, 311, 636, 279,
	9499, 369, 11, 304, 279, 3645, 330, 13020, 11, 14438, 66820, 2186, 330, 3928, 794, 5324, 1337, 794,
	330, 928, 498, 330, 4789, 794, 330, 791, 5089, 311, 471, 279, 9499, 304, 320, 68, 1326, 2637, 330,
	66, 41347, 498, 330, 69, 49010, 1865, 9388, 2186, 330, 6413, 794, 4482, 2588, 498, 330, 3928, 1365,
	3500, 633, 3923, 374, 279, 9282, 304, 41958, 1314, 1457, 30, 128009, 128006, 78191, 128007, 271}

// llamaGolden lists (text, ids) pairs for Llama-3 without BOS.
var llamaGolden = []struct {
	text string
	ids  []uint32
}{
	{"Hello world", []uint32{9906, 1917}},
	{" Hello", []uint32{22691}},
	// daulet/tokenizers' test of Hugging Face's Rust tokenizer on this tokenizer.json.
	{"brown fox jumps over the lazy dog", []uint32{65561, 39935, 35308, 927, 279, 16053, 5679}},
	{"<|begin_of_text|>", []uint32{128000}},
	{llamaChatPrompt, llamaChatIDs},
	// tiny-vllm's and LLaMA-Factory's Llama-3 prompts (" 2" is a lone space then a digit).
	{"What is 2+2?", []uint32{3923, 374, 220, 17, 10, 17, 30}},
	{"What is the capital of France?", []uint32{3923, 374, 279, 6864, 315, 9822, 30}},
	{"", nil},
}

// llamaFiles are the three ways of loading Llama-3 here; all must give the golden ids.
var llamaFiles = []string{llamaJSON, llamaTiktoken, llamaTiktokenBare}

func TestLlama3Golden(t *testing.T) {
	for _, file := range llamaFiles {
		tk := loadData(t, file)
		for _, c := range llamaGolden {
			got, err := tk.Encode(c.text)
			if err != nil {
				t.Fatalf("%s: Encode(%q): %v", file, c.text, err)
			}
			if !slices.Equal(got, c.ids) && !(len(got) == 0 && len(c.ids) == 0) {
				t.Errorf("%s: Encode(%q)\n got %v\nwant %v", file, c.text, got, c.ids)
			}
		}
	}
}

func TestLlama3GoldenAddBOS(t *testing.T) {
	for _, file := range llamaFiles {
		tk, err := LoadWith(testData(t, file), Options{AddBOS: true})
		if err != nil {
			t.Fatalf("LoadWith(%s, AddBOS): %v", file, err)
		}
		if !strings.HasSuffix(tk.Name(), "+bos") {
			t.Errorf("%s: Name() = %q, want a +bos suffix", file, tk.Name())
		}
		got, err := tk.Encode(llamaPiratePrompt)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, llamaPirateIDsWithBOS) {
			t.Errorf("%s: pirate prompt with BOS\n got %v\nwant %v", file, got, llamaPirateIDsWithBOS)
		}
		// As vLLM showed: a template that writes the BOS plus AddBOS doubles it.
		got, _ = tk.Encode(llamaChatPrompt)
		if want := append([]uint32{128000}, llamaChatIDs...); !slices.Equal(got, want) {
			t.Errorf("%s: chat prompt with BOS\n got %v\nwant %v", file, got, want)
		}
		if got, _ := tk.Encode(""); !slices.Equal(got, []uint32{128000}) {
			t.Errorf("%s: empty text with BOS = %v", file, got)
		}
	}
}

// TestLlama31ToolsRoundTrip re-encodes the decoded text of a published id sequence. For
// byte-level BPE, decode(ids) is the text that produced them, so the ids must come back.
func TestLlama31ToolsRoundTrip(t *testing.T) {
	dec := llamaDecoder(t)
	text := dec.decode(t, llama31ToolsIDs)
	for _, want := range []string{"Cutting Knowledge Date: December 2023", "26 Jul 2024", `"get_temperature"`, "paris right now?"} {
		if !strings.Contains(text, want) {
			t.Fatalf("decoded prompt lacks %q:\n%s", want, text)
		}
	}
	for _, file := range llamaFiles {
		got, err := loadData(t, file).Encode(text)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, llama31ToolsIDs) {
			t.Errorf("%s: tools prompt\n got %v\nwant %v", file, got, llama31ToolsIDs)
		}
	}
}

// TestKimiGolden: Kimi-K2's tiktoken file, its tokenizer_config.json special tokens, and its
// pattern, which needs Oniguruma's class intersection; ids from daulet/tokenizers' test of
// Hugging Face's tokenizer.
func TestKimiGolden(t *testing.T) {
	pattern := strings.Join([]string{
		`[\p{Han}]+`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`\p{N}{1,3}`,
		` ?[^\s\p{L}\p{N}]+[\r\n]*`,
		`\s*[\r\n]+`,
		`\s+(?!\S)`,
		`\s+`,
	}, "|")
	tk, err := LoadWith(testData(t, kimiTiktoken), Options{Pattern: pattern})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		text string
		ids  []uint32
	}{
		{"Hello, world! 你好，世界！", []uint32{19180, 11, 2695, 0, 220, 33845, 378, 2243, 856}},
		{"<|im_middle|>Hello, world! 你好，世界！<|im_end|>", []uint32{163601, 19180, 11, 2695, 0, 220, 33845, 378, 2243, 856, 163586}},
	}
	for _, c := range cases {
		got, err := tk.Encode(c.text)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.ids) {
			t.Errorf("Encode(%q)\n got %v\nwant %v", c.text, got, c.ids)
		}
	}
	// The BOS comes from tokenizer_config.json's bos_token.
	tk, err = LoadWith(testData(t, kimiTiktoken), Options{Pattern: pattern, AddBOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tk.Encode("Hello"); len(got) != 2 || got[0] != 163584 {
		t.Errorf("Kimi with BOS: %v, want [BOS]=163584 first", got)
	}
}

// TestLlama3SpecialTokensMatchJSON checks the built-in Llama-3 special-token layout (used for a
// bare tiktoken file) against the tokenizer.json's added_tokens.
func TestLlama3SpecialTokensMatchJSON(t *testing.T) {
	data, err := os.ReadFile(testData(t, llamaJSON))
	if err != nil {
		t.Fatal(err)
	}
	f := parseHFFileForTest(t, data)
	builtin := llama3SpecialTokens()
	if len(f.AddedTokens) != len(builtin) {
		t.Fatalf("tokenizer.json has %d added tokens, built-in layout %d", len(f.AddedTokens), len(builtin))
	}
	for _, a := range f.AddedTokens {
		if id, ok := builtin[a.Content]; !ok || id != a.ID {
			t.Errorf("%q: tokenizer.json id %d, built-in %d (present %v)", a.Content, a.ID, id, ok)
		}
	}
}
