#!/usr/bin/env bash
# Run a real agent (claude|codex) against the fake provider DIRECTLY (no mcptape), with the MCP
# server-everything over stdio, inside a loopback-only network namespace when possible.
#
#   tests/agents/run_direct.sh AGENT [--fault KIND] [--out DIR] [--prompt TEXT]
#                                    [--root DIR [--keep-home]]
#
# Prints the agent's final output, the fake provider's log summary, and PASS/FAIL (exit 0/1):
# PASS = the provider answered one tool call, the agent sent the tool result back, and the agent's
# output holds "FINAL: " followed by the echo tool's text.
# --out DIR keeps provider.log (one JSON line per connection/request), agent.stdout, agent.stderr,
# and the agent's config folder there (default: a temp folder, deleted).
# --root DIR runs in DIR (wiped first, kept afterwards) instead of a random temp folder, so the
# paths the agents put in their prompts are the same run to run; --keep-home keeps DIR/home (the
# agent's config folder: device/installation ids) from the previous run.
# Env: AGENT_TIMEOUT (s, default 120), NO_NETNS=1 to skip the namespace, CODEX_PROVIDER=builtin
# to use codex's built-in openai provider (openai_base_url) instead of a custom one, BASE_PREFIX=/p
# to give the agent the base URL http://127.0.0.1:PORT/p (a path prefix), MCP_TEE=1 to log the MCP
# JSON-RPC traffic to mcp.log (through mcp_tee.py).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MCP_SERVER="${MCP_SERVER:-$HERE/../peers/node_modules/.bin/mcp-server-everything}"
[ -d "$(dirname "$MCP_SERVER")" ] && MCP_SERVER="$(cd "$(dirname "$MCP_SERVER")" && pwd)/$(basename "$MCP_SERVER")"

usage() { echo "usage: $0 claude|codex [--fault KIND] [--out DIR] [--prompt TEXT] [--root DIR [--keep-home]]" >&2; exit 2; }
[ $# -ge 1 ] || usage
AGENT="$1"; shift
FAULT=none; OUT=""; ROOT=""; KEEP_HOME=""; PROMPT="Call the echo tool once, then reply with its result."
while [ $# -gt 0 ]; do
  case "$1" in
    --fault) FAULT="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --prompt) PROMPT="$2"; shift 2 ;;
    --root) ROOT="$2"; shift 2 ;;
    --keep-home) KEEP_HOME=1; shift ;;
    *) usage ;;
  esac
done
case "$AGENT" in claude|codex) ;; *) usage ;; esac
[ -z "$OUT" ] || OUT="$(mkdir -p "$OUT" && cd "$OUT" && pwd)"

# install (needs the registry) before entering the namespace
[ -n "${AGENTS_IN_NETNS:-}" ] || bash "$HERE/install.sh" >&2

# --- enter a loopback-only network namespace (re-exec inside it) ---
if [ -z "${AGENTS_IN_NETNS:-}" ] && [ -z "${NO_NETNS:-}" ]; then
  if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
    ARGS=("$AGENT" --fault "$FAULT" --prompt "$PROMPT")
    [ -n "$OUT" ] && ARGS+=(--out "$OUT")
    [ -n "$ROOT" ] && ARGS+=(--root "$ROOT")
    [ -n "$KEEP_HOME" ] && ARGS+=(--keep-home)
    exec unshare -n env AGENTS_IN_NETNS=1 bash "${BASH_SOURCE[0]}" "${ARGS[@]}"
  fi
  echo "note: unshare -n not permitted here; running on plain loopback (outside hosts NOT blocked)" >&2
elif [ -n "${NO_NETNS:-}" ]; then
  echo "note: NO_NETNS set; running on plain loopback (outside hosts NOT blocked)" >&2
fi
if [ -n "${AGENTS_IN_NETNS:-}" ]; then
  ip link set lo up
  echo "netns: loopback-only namespace ($(ip -o link | awk -F': ' '{print $2}' | tr '\n' ' '))"
fi

[ -x "$MCP_SERVER" ] || { echo "missing MCP server $MCP_SERVER (run npm ci in tests/peers)" >&2; exit 2; }

if [ -n "$ROOT" ]; then  # fixed paths (they appear in the agents' prompts); kept afterwards
  mkdir -p "$ROOT"; T="$(cd "$ROOT" && pwd)"
  case "$T" in /|/tmp|/root|/work|/work/main*|"$HOME") echo "refusing --root $T" >&2; exit 2 ;; esac
  for f in "$T"/* "$T"/.[!.]*; do
    [ -e "$f" ] || continue
    [ -n "$KEEP_HOME" ] && [ "$(basename "$f")" = home ] && continue
    rm -rf "$f"
  done
else
  T="$(mktemp -d /tmp/agent-run.XXXXXX)"
fi
PROV_PID=""
cleanup() {
  [ -n "$PROV_PID" ] && kill "$PROV_PID" 2>/dev/null || true
  if [ -n "$OUT" ]; then mkdir -p "$OUT"; cp -a "$T/." "$OUT/"; fi
  [ -n "$ROOT" ] || rm -rf "$T"
}
trap cleanup EXIT

# --- fake provider ---
python3 "$HERE/fake_provider.py" --tool echo --fault "$FAULT" --log "$T/provider.log" \
  >"$T/provider.stdout" 2>"$T/provider.stderr" &
PROV_PID=$!
for _ in $(seq 100); do [ -s "$T/provider.stdout" ] && break; sleep 0.05; done
BASE="$(head -1 "$T/provider.stdout")"
case "$BASE" in http://127.0.0.1:*) ;; *) echo "fake provider did not start" >&2; cat "$T/provider.stderr" >&2; exit 1 ;; esac
BASE="$BASE${BASE_PREFIX:-}"
echo "fake provider: $BASE (fault: $FAULT)"

# MCP server command (as a JSON array for claude, TOML array for codex); MCP_TEE=1 logs the
# JSON-RPC lines both ways to mcp.log through mcp_tee.py
if [ -n "${MCP_TEE:-}" ]; then
  MCP_CMD="$(command -v python3)"
  MCP_ARGS="\"$HERE/mcp_tee.py\", \"$T/mcp.log\", \"--\", \"$MCP_SERVER\", \"stdio\""
else
  MCP_CMD="$MCP_SERVER"
  MCP_ARGS="\"stdio\""
fi
mkdir -p "$T/home" "$T/work"
cd "$T/work"
TIMEOUT="${AGENT_TIMEOUT:-120}"
START=$(date +%s.%N)
set +e
if [ "$AGENT" = claude ]; then
  mkdir -p "$T/home/.claude"
  cat >"$T/mcp.json" <<EOF
{"mcpServers": {"S": {"type": "stdio", "command": "$MCP_CMD", "args": [$MCP_ARGS]}}}
EOF
  env -i PATH="$PATH" TERM=dumb HOME="$T/home" CLAUDE_CONFIG_DIR="$T/home/.claude" \
    ANTHROPIC_BASE_URL="$BASE" ANTHROPIC_API_KEY=sk-ant-fake-key-for-tests \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 \
    timeout "$TIMEOUT" "$HERE/node_modules/.bin/claude" -p "$PROMPT" \
      --mcp-config "$T/mcp.json" --strict-mcp-config --allowedTools mcp__S__echo \
      --output-format json </dev/null >"$T/agent.stdout" 2>"$T/agent.stderr"
  RC=$?
else
  if [ "${CODEX_PROVIDER:-custom}" = builtin ]; then
    # the built-in openai provider: tries a WebSocket upgrade on /v1/responses first
    PROVIDER_ARGS=(-c model_provider="openai" -c "openai_base_url=\"$BASE/v1\"")
  else
    PROVIDER_ARGS=(-c model_provider="fake"
      -c "model_providers.fake={name=\"fake\",base_url=\"$BASE/v1\",env_key=\"FAKE_KEY\",wire_api=\"responses\"}")
  fi
  env -i PATH="$PATH" TERM=dumb HOME="$T/home" CODEX_HOME="$T/home" FAKE_KEY=sk-fake-key-for-tests \
    OPENAI_API_KEY=sk-fake-key-for-tests \
    timeout "$TIMEOUT" "$HERE/node_modules/.bin/codex" exec --skip-git-repo-check \
      --disable apps --disable plugins \
      -c model="gpt-fake" -c approval_policy="never" -c analytics.enabled=false \
      "${PROVIDER_ARGS[@]}" \
      -c "mcp_servers.S={command=\"$MCP_CMD\",args=[$MCP_ARGS],default_tools_approval_mode=\"approve\"}" \
      "$PROMPT" </dev/null >"$T/agent.stdout" 2>"$T/agent.stderr"
  RC=$?
fi
set -e
END=$(date +%s.%N)
WALL=$(python3 -c "print(f'{$END-$START:.2f}')")

echo "--- $AGENT exit $RC, wall ${WALL}s; final output (stdout):"
cat "$T/agent.stdout"; echo
if [ "$RC" != 0 ]; then echo "--- stderr (tail):"; tail -20 "$T/agent.stderr"; fi

echo "--- fake provider log summary:"
python3 - "$T/provider.log" "$T/agent.stdout" "$AGENT" <<'PY'
import collections, json, sys
log, out, agent = sys.argv[1], sys.argv[2], sys.argv[3]
conns, per, tool_calls, tool_results = 0, collections.Counter(), 0, 0
sizes = []
for line in open(log):
    r = json.loads(line)
    if "connection" in r:
        conns += 1
        continue
    path = r["path"]
    per[f'{r["method"]} {path} -> {r.get("status")}'] += 1
    if r.get("reply", "").startswith("tool"):
        tool_calls += 1
    if r.get("reply", "").startswith("final"):
        sizes.append(r.get("body_bytes"))
        b = r["body"] if isinstance(r["body"], dict) else {}
        txt = json.dumps(b)
        if '"tool_result"' in txt or '"function_call_output"' in txt:
            tool_results += 1
    elif r["method"] == "POST":
        sizes.append(r.get("body_bytes"))
print(f"connections: {conns}")
for k, v in per.items():
    print(f"  {v} x {k}")
print(f"model requests answered with a tool call: {tool_calls}; requests carrying a tool result: {tool_results}")
print("POST body sizes (bytes as received): " + ", ".join(map(str, sizes)))
text = open(out).read()
ok = tool_calls >= 1 and tool_results >= 1 and "FINAL: " in text and "Echo: hello from the fake model" in text
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
