#!/bin/sh
# Builds the bootstrap of every function of template.yaml into infra/sam/bin/<cmd>/bootstrap
# (provided.al2023, arm64, static, without the legacy RPC mode).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
for fn in lambda-route lambda-explain lambda-requests lambda-events lambda-gateway; do
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -trimpath -ldflags='-s -w' \
		-o "$here/bin/$fn/bootstrap" "./cmd/$fn"
	echo "built $here/bin/$fn/bootstrap"
done
