package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// A router loads the model's tokenizer once and encodes each chat-templated prompt; the ids then
// go to blockhash. The template already holds <|begin_of_text|>, so AddBOS stays off.
func Example() {
	tk, err := tokenizer.Load("/models/Meta-Llama-3-8B-Instruct/tokenizer.json")
	if err != nil {
		log.Fatal(err)
	}
	ids, err := tk.Encode("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello world<|eot_id|>")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tk.Name(), ids) // ... [128000 128006 882 128007 271 9906 1917 128009]
}
