#!/usr/bin/env bash
# fuzz-smoke.sh — runs every fuzz target of the module for a short fixed time, one at a time, so that
# CI does more than replay the seeds (`make fuzz-smoke`; `make test` runs it when CI is set).
#
# The targets are found, not listed: every `func FuzzXxx(` in a *_test.go file. Each must have a
# committed seed corpus, testdata/fuzz/FuzzXxx/ beside its test file (a missing one fails the run).
# A failing input is written there by `go test` (commit it: it becomes a regression seed).
#
# Usage: scripts/fuzz-smoke.sh [FUZZTIME]   FUZZTIME: per target, a go test -fuzztime value (default 8s)
# Env:   GO   the go command (default go)
# Exit:  0 every target ran its time without a failure; 1 otherwise.
set -euo pipefail

fuzztime="${1:-8s}"
go="${GO:-go}"
cd "$(dirname "$0")/.."

# target lines: "DIR FUNC", sorted.
mapfile -t targets < <(grep -rEo --include='*_test.go' --exclude-dir=testdata --exclude-dir=.git --exclude-dir=vendor '^func Fuzz[A-Za-z0-9_]+\(' . |
  sed -E 's#^\./(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+)\($#\1 \2#' | grep -v '^\./' | sort -u)
if ((${#targets[@]} == 0)); then
  echo "fuzz-smoke: no fuzz targets found" >&2
  exit 1
fi

failed=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
for t in "${targets[@]}"; do
  dir="${t% *}"
  fn="${t#* }"
  if ! compgen -G "$dir/testdata/fuzz/$fn/*" >/dev/null; then
    echo "fuzz-smoke: $dir: $fn has no seed corpus in $dir/testdata/fuzz/$fn/ (commit one)"
    failed+=("$dir $fn")
    continue
  fi
  echo "go test -run '^\$' -fuzz '^$fn\$' -fuzztime $fuzztime ./$dir"
  # On a loaded 2-core box Go's fuzzing coordinator can give up on a worker with "context deadline
  # exceeded" (it found nothing: no input is written). That case is retried, up to 3 times after a
  # 5-second pause (CI runs this right after the container suites, whose teardown can still load the
  # box; one retry was seen to meet the deadline again); a real failure writes its input to the corpus
  # directory and is never retried.
  ok=0
  for attempt in 1 2 3 4; do
    before=$(ls "$dir/testdata/fuzz/$fn" | wc -l)
    if "$go" test -run '^$' -fuzz "^$fn\$" -fuzztime "$fuzztime" "./$dir" 2>&1 | tee "$log"; then
      ok=1
      break
    fi
    after=$(ls "$dir/testdata/fuzz/$fn" | wc -l)
    if [[ $after != "$before" ]] || ! grep -q 'context deadline exceeded' "$log" || ((attempt == 4)); then
      break
    fi
    echo "fuzz-smoke: $fn: coordinator deadline under load, no failing input written: retry $attempt of 3 in 5 s"
    sleep 5
  done
  ((ok)) || failed+=("$dir $fn")
done
echo "fuzz-smoke: ${#targets[@]} targets in $((SECONDS - start)) s"
if ((${#failed[@]})); then
  printf 'fuzz-smoke: FAIL %s\n' "${failed[@]}"
  exit 1
fi
