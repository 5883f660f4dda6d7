// Command lambda-gateway is the AWS Lambda function serving kvrouter's OpenAI-compatible gateway
// (POST /v1/completions, POST /v1/chat/completions, GET /v1/models) with a streamed response, for
// API Gateway REST API streaming proxy integrations (response transfer mode STREAM) and Function URLs in
// RESPONSE_STREAM mode. It runs the same proxy core as `kvrouter serve` (package gateway).
// Configuration: KVROUTER_* environment variables (functions.ConfigFromEnv). Build for provided.al2023 on
// arm64 (streamed responses need the runtime API loop, i.e. -tags lambda.norpc):
//
//	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -o bootstrap ./cmd/lambda-gateway
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/kvrouter/kvrouter/functions"
)

func main() {
	// The store (one Redis client), the router and the gateway are created here, once per execution
	// environment.
	functions.GatewayMain(func(h *functions.GatewayHandler) { lambda.StartHandlerFunc(h.Handle) })
}
