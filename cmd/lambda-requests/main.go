// Command lambda-requests is the AWS Lambda function serving kvrouter's requests endpoint(s) (functions.RequestsEndpoints)
// for Function URL and API Gateway HTTP API (v2) events. Configuration: KVROUTER_* environment variables
// (functions.ConfigFromEnv). Build for provided.al2023 on arm64:
//
//	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -o bootstrap ./cmd/lambda-requests
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/kvrouter/kvrouter/functions"
)

func main() {
	// The store (one Redis client) and the router are created here, once per execution environment.
	functions.Main(functions.RequestsEndpoints, func(h *functions.Handler) { lambda.Start(h.HandleHTTP) })
}
