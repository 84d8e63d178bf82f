#!/usr/bin/env bash
# One llm CLI run through `mcptape run` (record, then --playback with the fake provider
# stopped), streamed or not, inside the current network namespace; for tests/it/llm_cli.rs.
# Usage: llm_run.sh ROOT MCPTAPE [--no-stream]
# Writes ROOT/rec.{out,err,rc}, ROOT/play.{out,err,rc}, ROOT/t.jsonl, ROOT/prov.log.
set -u
ROOT=$1 MT=$2 NS=${3:-}
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ip link set lo up 2>/dev/null || true
mkdir -p "$ROOT/home/.llm-tools-mcp"
# The Python SDK fixture server: no unsolicited notifications (llm-tools-mcp's mcp 1.x client
# crashed under load when server-everything's recorded notifications came after it closed).
printf '{"mcpServers": {"S": {"command": "%s", "args": ["%s"]}}}' \
  "$HERE/../peers/.venv/bin/python" "$HERE/../peers/py_server.py" > "$ROOT/home/.llm-tools-mcp/mcp.json"
cp "$ROOT/home/.llm-tools-mcp/mcp.json" "$ROOT/mcp.json.orig"
python3 "$HERE/fake_provider.py" --tool echo --args '{"text":"hello from the fake model"}' --log "$ROOT/prov.log" >"$ROOT/prov.out" 2>"$ROOT/prov.err" &
PP=$!
for _ in $(seq 200); do [ -s "$ROOT/prov.out" ] && break; sleep 0.05; done
UP=$(head -1 "$ROOT/prov.out")
run() {
  (cd "$ROOT" && env -i PATH="$PATH" HOME="$ROOT/home" LLM_USER_PATH="$ROOT/home/llm" \
    OPENAI_API_KEY=sk-fake-key-for-tests OPENAI_BASE_URL="$UP/v1" MCPTAPE_DIR="$ROOT/store" \
    timeout 120 "$MT" run --tape "$ROOT/t.jsonl" "$@" -- "$HERE/.venv-llm/bin/llm" \
    -m gpt-4o-mini -T MCP $NS "Call the echo tool" </dev/null)
}
run >"$ROOT/rec.out" 2>"$ROOT/rec.err"; echo $? >"$ROOT/rec.rc"
kill "$PP"; wait "$PP" 2>/dev/null
run --playback >"$ROOT/play.out" 2>"$ROOT/play.err"; echo $? >"$ROOT/play.rc"
