#!/usr/bin/env bash
# Lints the GitHub Actions workflows (.github/workflows/*.yml) with actionlint, built from the Go
# module proxy into the shared cache (~/.cache/crewlet-operator/bin/tools), as `make bins` builds
# the Kubernetes binaries. Idempotent: an actionlint that already reports the wanted
# version is not rebuilt, so every run after the first costs a fraction of a second.
#
# The version is pinned for reproducible lint: the newest that `go list -m -versions
# github.com/rhysd/actionlint` listed when it was last moved. Move it with ACTIONLINT_VERSION=...
# (or by editing the default below after checking that list).
#
# actionlint also runs shellcheck on every `run:` block when shellcheck is on PATH; without it,
# that part is skipped (and said so below), which is fine.
set -euo pipefail

ACTIONLINT_VERSION=${ACTIONLINT_VERSION:-v1.7.12}
CACHE=${CREWLET_CACHE:-$HOME/.cache/crewlet-operator}
TOOLS=${CREWLET_TOOLS_DIR:-$CACHE/bin/tools}
BIN="$TOOLS/actionlint"
cd "$(dirname "$0")/.."

say() { printf 'actionlint: %s\n' "$*"; }
# Capture first: `cmd | grep -q` under pipefail fails when grep exits early (SIGPIPE).
has_version() {
  [ -x "$BIN" ] || return 1
  local out; out=$("$BIN" -version 2>/dev/null) || return 1
  grep -q -- "${ACTIONLINT_VERSION#v}" <<<"$out"
}

if ! has_version; then
  command -v go >/dev/null || { say "go is needed to build actionlint $ACTIONLINT_VERSION" >&2; exit 1; }
  say "building actionlint $ACTIONLINT_VERSION into $TOOLS"
  mkdir -p "$TOOLS"
  CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$TOOLS" \
    go install -trimpath -ldflags "-s -w -X github.com/rhysd/actionlint.version=${ACTIONLINT_VERSION#v}" \
    "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
  has_version || { say "built $BIN but it does not report $ACTIONLINT_VERSION" >&2; exit 1; }
fi

shopt -s nullglob
workflows=(.github/workflows/*.yml .github/workflows/*.yaml)
if [ ${#workflows[@]} -eq 0 ]; then
  say "no workflows under .github/workflows; nothing to lint"
  exit 0
fi
if command -v shellcheck >/dev/null; then
  checker="with shellcheck"
else
  checker="without shellcheck (not installed: run: blocks are not shell-checked)"
fi
say "$("$BIN" -version | head -n1) on ${workflows[*]} $checker"
"$BIN" -no-color "${workflows[@]}"
say "no problems found"
