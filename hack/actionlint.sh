#!/usr/bin/env bash
# Lints the GitHub Actions workflows (.github/workflows/*.yml) with actionlint, built from the Go
# module proxy into the shared cache (~/.cache/crewlet-operator/bin/tools) by hack/go-tool.sh, once.
# Its version is pinned in hack/go-tools.txt, for reproducible lint.
#
# actionlint also runs shellcheck on every `run:` block when shellcheck is on PATH; without it,
# that part is skipped (and said so below), which is fine.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(bash hack/go-tool.sh actionlint)

say() { printf 'actionlint: %s\n' "$*"; }

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
