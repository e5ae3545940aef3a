#!/bin/sh
# Installs the coding agents the end-to-end tests drive, pinned, into .agents/ (not
# committed): `make agents`, or the tests themselves when it is missing. Needs npm and the
# npm registry; the tests skip with the reason when either is away.
set -eu
CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
CLAUDE_CODE_VERSION="${CLAUDE_CODE_VERSION:-2.1.332}"
here="$(cd "$(dirname "$0")/../../.." && pwd)"
prefix="$here/.agents"
mkdir -p "$prefix"
cd "$prefix"
[ -f package.json ] || echo '{"private": true}' > package.json
npm install --no-audit --no-fund --loglevel=error \
  "@openai/codex@$CODEX_VERSION" "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION"
"$prefix/node_modules/.bin/codex" --version
"$prefix/node_modules/.bin/claude" --version
