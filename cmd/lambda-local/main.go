// Command lambda-local invokes kvrouter's Lambda handlers on this machine, without AWS: it builds a
// function exactly as its cmd/lambda-* main does (functions.ConfigFromEnv, functions.Setup,
// functions.NewHandler with the function's endpoints), then feeds it event files through the same
// JSON path the Lambda runtime uses (aws-lambda-go's lambda.NewHandler(...).Invoke) and prints each
// response as the function would return it, one JSON object per line. Events run in order against one
// store, so an events call, a route and its done see each other (as warm invocations do).
//
//	go run ./cmd/lambda-local --block-size 4 --worker w0=http://w0:8000 --worker w1=http://w1:8000 \
//	    functions/testdata/function_url_events.json functions/testdata/apigw_v2_route.json
//
// Configuration: the functions' KVROUTER_* environment variables (KVROUTER_STORE, KVROUTER_POOL,
// KVROUTER_BLOCK_SIZE, …); --store and --block-size override two of them. --worker registers workers
// first (a deployment registers them through `kvrouter serve` or the store; no Lambda function does).
// See docs/LAMBDA.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/kvrouter/kvrouter/functions"
	"github.com/kvrouter/kvrouter/server/api"
)

// endpointSets maps --function to the endpoints of the deployed function of that name.
var endpointSets = map[string][]string{
	"route":    functions.RouteEndpoints,
	"explain":  functions.ExplainEndpoints,
	"requests": functions.RequestsEndpoints,
	"events":   functions.EventsEndpoints,
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lambda-local:", err)
		os.Exit(1)
	}
}

// workerFlags collects repeated --worker ID=URL flags.
type workerFlags [][2]string

func (w *workerFlags) String() string { return fmt.Sprint(*w) }

func (w *workerFlags) Set(v string) error {
	id, url, ok := strings.Cut(v, "=")
	if !ok || id == "" || url == "" {
		return fmt.Errorf("want ID=URL, got %q", v)
	}
	*w = append(*w, [2]string{id, url})
	return nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	names := make([]string, 0, len(endpointSets))
	for n := range endpointSets {
		names = append(names, n)
	}
	sort.Strings(names)
	fs := flag.NewFlagSet("lambda-local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: lambda-local [--function all] [--store URL] [--block-size N] [--worker ID=URL]... EVENT.json... (- = stdin)")
		fs.PrintDefaults()
	}
	function := fs.String("function", "all", "the function to run: all (every endpoint) or one of "+strings.Join(names, ", "))
	store := fs.String("store", "", "overrides KVROUTER_STORE: memory or a Redis URL")
	blockSize := fs.Int("block-size", 0, "overrides KVROUTER_BLOCK_SIZE (tokens) for the pool created at start; the sample events use 4")
	var workers workerFlags
	fs.Var(&workers, "worker", "register worker ID with URL before the events (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no event file")
	}
	endpoints, ok := endpointSets[*function]
	if *function == "all" {
		endpoints, ok = nil, true
		for _, n := range names {
			endpoints = append(endpoints, endpointSets[n]...)
		}
	}
	if !ok {
		return fmt.Errorf("--function %q: want all or one of %s", *function, strings.Join(names, ", "))
	}
	cfg, err := functions.ConfigFromEnv(getenv)
	if err != nil {
		return err
	}
	if *store != "" {
		cfg.Store = *store
	}
	if *blockSize > 0 {
		cfg.BlockSize = *blockSize
	}
	a, st, err := functions.Setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, w := range workers {
		body, _ := json.Marshal(map[string]string{"url": w[1]})
		r := a.Do(ctx, api.Request{Method: "PUT", RawPath: "/v1/workers/" + w[0], Body: body,
			Query: func(n string) string {
				if n == "pool" {
					return cfg.Pool
				}
				return ""
			}})
		if r.Status != 200 {
			return fmt.Errorf("register worker %s: %d %s", w[0], r.Status, r.Body)
		}
	}
	h := lambda.NewHandler(functions.NewHandler(a, cfg.MaxBodyBytes, endpoints...).HandleHTTP)
	for _, name := range fs.Args() {
		var ev []byte
		if name == "-" {
			ev, err = io.ReadAll(os.Stdin)
		} else {
			ev, err = os.ReadFile(name)
		}
		if err != nil {
			return err
		}
		out, err := h.Invoke(ctx, ev)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		var resp struct {
			StatusCode int `json:"statusCode"`
		}
		_ = json.Unmarshal(out, &resp)
		fmt.Fprintf(stderr, "%s → %d\n", name, resp.StatusCode)
		fmt.Fprintf(stdout, "%s\n", out)
	}
	return nil
}
