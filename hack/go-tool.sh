#!/usr/bin/env bash
# Usage: hack/go-tool.sh NAME
#
# Builds the Go tool NAME at the version hack/go-tools.txt pins, from the Go module proxy, into the
# shared cache (~/.cache/crewlet-operator/bin/tools, or CREWLET_TOOLS_DIR), as `make bins` builds
# the Kubernetes binaries, and prints its path on stdout. Idempotent: a tool built at that
# version (its stamp file says so) is not rebuilt, so every call after the first costs a
# fraction of a second. A first build takes from seconds (crane) to many minutes (cosign, syft).
set -euo pipefail

name=${1:?usage: hack/go-tool.sh NAME (a name in hack/go-tools.txt)}
here="$(cd "$(dirname "$0")" && pwd)"
read -r package version how < <(awk -v n="$name" '$1 == n { print $2, $3, $4 }' "$here/go-tools.txt") || true
[ -n "${package:-}" ] || { echo "go-tool: no tool named '$name' in $here/go-tools.txt" >&2; exit 2; }

CACHE=${CREWLET_CACHE:-$HOME/.cache/crewlet-operator}
TOOLS=${CREWLET_TOOLS_DIR:-$CACHE/bin/tools}
BIN="$TOOLS/$name"
STAMP="$TOOLS/.$name-$version"

if ! { [ -x "$BIN" ] && [ -e "$STAMP" ]; }; then
  command -v go >/dev/null || { echo "go-tool: go is needed to build $name $version" >&2; exit 1; }
  echo "go-tool: building $name $version into $TOOLS (once)" >&2
  mkdir -p "$TOOLS"
  if [ "${how:-}" = module ]; then
    # A module whose go.mod has replace directives cannot be `go install`ed at a version: it
    # is required as a tool by a throwaway module, which resolves its dependencies instead.
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && go mod init "tool.local/$name" && go get -tool "$package@$version" \
      && CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
        go build -trimpath -ldflags "-s -w" -o "$BIN" "$package") >&2
  else
    # Built in a directory of its own, so that a go.mod around the caller is not consulted.
    (cd "$TOOLS" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$TOOLS" \
      go install -trimpath -ldflags "-s -w" "$package@$version") >&2
  fi
  rm -f "$TOOLS/.$name"-*
  touch "$STAMP"
fi
echo "$BIN"
