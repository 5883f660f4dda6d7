#!/usr/bin/env bash
# Builds a FROM-scratch image of the static kvrouter binary (CGO_ENABLED=0), so
# that testcontainers can run `kvrouter serve|ingest|mock` on a machine that
# cannot pull from any registry. Unlike infra/redis-image it always rebuilds:
# the image must hold the binary of the checked-out source (the Go build cache
# and Docker's layer cache make an unchanged rebuild take seconds).
#
# Usage: infra/kvrouter-image/build.sh [TAG]      (default TAG: kvrouter/kvrouter-local:dev)
# Env:   GO  the go command (default go)
set -euo pipefail

TAG="${1:-kvrouter/kvrouter-local:dev}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT_DIR="$(cd "$HERE/../.." && pwd)"
GO="${GO:-go}"

log() { echo "kvrouter-image: $*" >&2; }

command -v docker >/dev/null 2>&1 || { log "docker not found"; exit 1; }

CTX="$(mktemp -d)"
trap 'rm -rf "$CTX"' EXIT
mkdir -p "$CTX/rootfs/usr/bin" "$CTX/rootfs/tmp" "$CTX/rootfs/etc"
chmod 1777 "$CTX/rootfs/tmp"
(cd "$ROOT_DIR" && CGO_ENABLED=0 "$GO" build -trimpath -o "$CTX/rootfs/usr/bin/kvrouter" ./cmd/kvrouter)
cat > "$CTX/rootfs/etc/passwd" <<'PW'
root:x:0:0:root:/root:/nonexistent
nobody:x:65534:65534:nobody:/nonexistent:/nonexistent
PW
cp "$HERE/Dockerfile" "$CTX/Dockerfile"
# The legacy builder needs no buildx plugin and pulls nothing for FROM scratch.
DOCKER_BUILDKIT=0 docker build -q -t "$TAG" "$CTX" >/dev/null
log "built $TAG ($(du -sh "$CTX/rootfs/usr/bin/kvrouter" | cut -f1) binary)"
