#!/usr/bin/env bash
# Idempotent install of the pinned agents (package-lock.json) into tests/agents/node_modules.
# Skips when node_modules/.package-lock.json is newer than package-lock.json and both binaries run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
claude_ok() { ./node_modules/.bin/claude --version >/dev/null 2>&1; }
codex_ok() { ./node_modules/.bin/codex --version >/dev/null 2>&1; }
gemini_ok() { ./node_modules/.bin/gemini --version >/dev/null 2>&1; }
opencode_ok() { ./node_modules/.bin/opencode --version >/dev/null 2>&1; }
if [ -f node_modules/.package-lock.json ] && ! [ package-lock.json -nt node_modules/.package-lock.json ] \
   && claude_ok && codex_ok && gemini_ok && opencode_ok; then
  echo "agents up to date: $(./node_modules/.bin/claude --version), $(./node_modules/.bin/codex --version), Gemini CLI $(./node_modules/.bin/gemini --version), opencode $(./node_modules/.bin/opencode --version)"
  exit 0
fi
start=$(date +%s)
npm ci --no-audit --no-fund
# Claude Code's postinstall copies the native binary over bin/claude.exe; an npm that skips
# install scripts leaves a placeholder, so run it explicitly when needed.
if ! claude_ok; then
  (cd node_modules/@anthropic-ai/claude-code && node install.cjs)
fi
# opencode is pinned as its Linux x64 build (the package `opencode-ai` picks one of twelve
# platform packages at install, which the lock file cannot hold where the registry has only
# this one): linked where npm links the others.
ln -sf ../opencode-linux-x64/bin/opencode node_modules/.bin/opencode
claude_ok || { echo "claude does not run after install" >&2; exit 1; }
codex_ok || { echo "codex does not run after install" >&2; exit 1; }
gemini_ok || { echo "gemini does not run after install" >&2; exit 1; }
opencode_ok || { echo "opencode does not run after install" >&2; exit 1; }
touch node_modules/.package-lock.json
echo "agents installed in $(( $(date +%s) - start ))s ($(du -sh node_modules | cut -f1)): $(./node_modules/.bin/claude --version), $(./node_modules/.bin/codex --version), Gemini CLI $(./node_modules/.bin/gemini --version), opencode $(./node_modules/.bin/opencode --version)"
