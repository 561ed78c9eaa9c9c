#!/usr/bin/env bash
# Builds promtool (Prometheus' rule tester) from the Go module proxy into the shared cache
# (~/.cache/crewlet-operator/bin/tools), as `make bins` builds the Kubernetes binaries, for the
# chart's alert tests (unit/test_alerts.py: `promtool test rules`). Idempotent: a promtool that
# already reports the wanted version is not rebuilt.
#
# Prometheus tags its Go module v0.<major><minor>.<patch>: v0.316.0 is Prometheus 3.16.0, the
# newest that `go list -m -versions github.com/prometheus/prometheus` listed when it was last
# moved. Move it with PROMETHEUS_VERSION=... (or by editing the default below).
set -euo pipefail

PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
CACHE=${CREWLET_CACHE:-$HOME/.cache/crewlet-operator}
TOOLS=${CREWLET_TOOLS_DIR:-$CACHE/bin/tools}
BIN="$TOOLS/promtool"
STAMP="$TOOLS/.promtool-$PROMETHEUS_VERSION"

say() { printf 'promtool: %s\n' "$*"; }

if [ -x "$BIN" ] && [ -e "$STAMP" ]; then
  say "$BIN ($PROMETHEUS_VERSION) present; nothing built"
  exit 0
fi
command -v go >/dev/null || { say "go is needed to build promtool $PROMETHEUS_VERSION" >&2; exit 1; }
say "building promtool $PROMETHEUS_VERSION into $TOOLS (minutes, once)"
mkdir -p "$TOOLS"
CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$TOOLS" \
  go install -trimpath -ldflags "-s -w" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
"$BIN" --version >/dev/null
rm -f "$TOOLS"/.promtool-*
touch "$STAMP"
say "built $BIN"
