#!/usr/bin/env bash
# Builds a local Redis image FROM scratch out of the host's /usr/bin/redis-server
# (Debian's package) and the shared libraries it links, so that testcontainers
# can run Redis on a machine that cannot pull from any registry.
#
# Usage: infra/redis-image/build.sh [TAG]      (default TAG: kvrouter/redis-local:7)
# Env:   FORCE=1       rebuild even if the image already exists
#        NO_BUSYBOX=1  leave busybox (and so /bin/sh) out of the image
#        REDIS_SERVER  path of the binary to package (default /usr/bin/redis-server)
set -euo pipefail

TAG="${1:-kvrouter/redis-local:7}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REDIS_SERVER="${REDIS_SERVER:-/usr/bin/redis-server}"

log() { echo "redis-image: $*" >&2; }

if ! command -v docker >/dev/null 2>&1; then
  log "docker not found"; exit 1
fi
if [[ "${FORCE:-0}" != "1" ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
  log "image $TAG already exists (FORCE=1 rebuilds)"
  exit 0
fi
if [[ ! -x "$REDIS_SERVER" ]]; then
  log "$REDIS_SERVER not found (apt-get install -y redis-server)"; exit 1
fi

# Optional static busybox: gives the image /bin/sh, so testcontainers' internal
# port check and `docker exec` work. Installed from Debian's packages if possible.
BUSYBOX=""
if [[ "${NO_BUSYBOX:-0}" == "1" ]]; then BUSYBOX_WANTED=0; else BUSYBOX_WANTED=1; fi
is_static() { file -L "$1" 2>/dev/null | grep -q 'statically linked' || ! ldd "$1" >/dev/null 2>&1; }
find_busybox() {
  local b
  for b in /bin/busybox /usr/bin/busybox; do
    if [[ -x "$b" ]] && is_static "$b"; then BUSYBOX="$b"; return 0; fi
  done
  return 1
}
# Only when no busybox at all is installed: busybox-static replaces Debian's
# dynamic busybox package, which we leave alone.
if ((BUSYBOX_WANTED)) && ! find_busybox && ! command -v busybox >/dev/null 2>&1 &&
  [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; then
  log "installing busybox-static (optional)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q busybox-static >/dev/null 2>&1 || true
  find_busybox || true
fi

CTX="$(mktemp -d)"
trap 'rm -rf "$CTX"' EXIT
ROOT="$CTX/rootfs"
mkdir -p "$ROOT/usr/bin" "$ROOT/tmp" "$ROOT/etc" "$ROOT/bin"
chmod 1777 "$ROOT/tmp"

# The binary itself; its name must end in redis-server (redis decides its mode
# from argv[0]: redis-check-rdb/aof are the same executable).
cp "$(readlink -f "$REDIS_SERVER")" "$ROOT/usr/bin/redis-server"

# Every library ldd lists, at the path the loader expects, plus the loader.
nlibs=0
while read -r lib; do
  [[ -n "$lib" ]] || continue
  mkdir -p "$ROOT$(dirname "$lib")"
  cp -L "$lib" "$ROOT$lib"
  nlibs=$((nlibs + 1))
done < <(ldd "$REDIS_SERVER" | awk '/=>/ && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
if [[ ! -e "$ROOT/lib64/ld-linux-x86-64.so.2" && -e /lib64/ld-linux-x86-64.so.2 ]]; then
  mkdir -p "$ROOT/lib64"
  cp -L /lib64/ld-linux-x86-64.so.2 "$ROOT/lib64/"
  nlibs=$((nlibs + 1))
fi

cat > "$ROOT/etc/passwd" <<'PW'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
PW
cat > "$ROOT/etc/group" <<'GR'
root:x:0:
nogroup:x:65534:
GR
# Without it glibc asks DNS before /etc/hosts; the chaos suite pins the names of Redis nodes it kills in
# /etc/hosts (Sentinel resolves synchronously, and a dead container's name times out in Docker's DNS).
echo 'hosts: files dns' > "$ROOT/etc/nsswitch.conf"

if ((!BUSYBOX_WANTED)); then BUSYBOX=""; fi
if [[ -n "$BUSYBOX" ]]; then
  cp "$BUSYBOX" "$ROOT/bin/busybox"
  # The applets testcontainers' port check runs, and a few for debugging.
  for a in sh cat awk grep nc ls ps env; do ln -s busybox "$ROOT/bin/$a"; done
  log "with busybox from $BUSYBOX"
else
  log "without busybox (no /bin/sh in the image)"
fi

cp "$HERE/Dockerfile" "$CTX/Dockerfile"
log "building $TAG from $(readlink -f "$REDIS_SERVER") ($nlibs libraries, $(du -sh "$ROOT" | cut -f1))"
# The legacy builder needs no buildx plugin and pulls nothing for FROM scratch.
if ! DOCKER_BUILDKIT=0 docker build -q -t "$TAG" "$CTX" >/dev/null; then
  log "docker build failed; falling back to docker import"
  tar -C "$ROOT" -c . | docker import \
    --change 'WORKDIR /tmp' \
    --change 'EXPOSE 6379' \
    --change 'ENTRYPOINT ["/usr/bin/redis-server"]' \
    --change 'CMD ["--protected-mode","no","--bind","0.0.0.0","--save","","--appendonly","no"]' \
    - "$TAG" >/dev/null
fi
log "built $TAG"
