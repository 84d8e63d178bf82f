#!/usr/bin/env python3
"""Self-test of fake_provider.py over real sockets (standard library only, ~2 s).

    python3 tests/agents/selftest_fake_provider.py

Starts the provider per fault mode, drives every API with http.client (keep-alive, streaming
and not), parses the SSE, and checks the script (tool call, then FINAL), the faults and the log.
Prints one line per check and "N passed, N failed"; exit 1 on a failure.
"""

import gzip
import http.client
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = []


def check(name, cond, detail=""):
    RESULTS.append(bool(cond))
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f"  -- {detail}"))


class Provider:
    def __init__(self, *args):
        self.log = tempfile.NamedTemporaryFile(suffix=".log", delete=False).name
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_provider.py"),
                                   "--log", self.log, *args], stdout=subprocess.PIPE, text=True)
        self.base = self.p.stdout.readline().strip()
        self.port = int(self.base.rsplit(":", 1)[1])

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def records(self):
        return [json.loads(line) for line in open(self.log)]

    def close(self):
        self.p.terminate()
        self.p.wait()
        os.unlink(self.log)


def post(c, path, body, headers=None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    c.request("POST", path, data, {"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    return r.status, r.getheader("Content-Type", ""), r.read()


def sse_events(raw):
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        ev, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        out.append((ev, data if data == "[DONE]" else json.loads(data)))
    return out


ANTH_TOOLS = [{"name": "Bash", "input_schema": {}}, {"name": "mcp__S__echo", "input_schema": {}}]
USER = {"role": "user", "content": "hi"}


def anthropic_text(events):
    return "".join(d["delta"].get("text", "") for e, d in events if e == "content_block_delta")


def main():
    # --- normal script, all APIs, one keep-alive connection ---
    p = Provider("--tool", "echo")
    c = p.conn()
    c.request("HEAD", "/")
    r = c.getresponse(); r.read()
    check("HEAD / -> 200", r.status == 200)
    c.request("GET", "/")
    r = c.getresponse(); r.read()
    check("GET / -> 200", r.status == 200)

    st, ct, raw = post(c, "/pfx/v1/messages?beta=true",
                       {"model": "m", "stream": True, "tools": ANTH_TOOLS, "messages": [USER]})
    ev = sse_events(raw)
    names = [e for e, _ in ev]
    check("anthropic stream: event order", names[0] == "message_start" and "ping" in names
          and names[-2:] == ["message_delta", "message_stop"], names)
    check("anthropic stream: event name == data type", all(e == d["type"] for e, d in ev))
    tu = [d for e, d in ev if e == "content_block_start"
          and d["content_block"]["type"] == "tool_use"]
    pj = "".join(d["delta"]["partial_json"] for e, d in ev if e == "content_block_delta"
                 and d["delta"]["type"] == "input_json_delta")
    check("anthropic stream: tool_use mcp__S__echo with partial_json args",
          tu and tu[0]["content_block"]["name"] == "mcp__S__echo"
          and json.loads(pj) == {"message": "hello from the fake model"}, (tu, pj))
    check("anthropic stream: stop_reason tool_use",
          ev[-2][1]["delta"]["stop_reason"] == "tool_use")
    msgs = [USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_fake_00",
                                                     "name": "mcp__S__echo", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_fake_00",
                                          "content": [{"type": "text", "text": "Echo: hi"}]}]}]
    st, ct, raw = post(c, "/v1/messages", {"model": "m", "stream": True, "tools": ANTH_TOOLS,
                                           "messages": msgs})
    check("anthropic stream: FINAL after tool_result",
          anthropic_text(sse_events(raw)) == "FINAL: Echo: hi", raw[:300])
    st, ct, raw = post(c, "/v1/messages", {"model": "m", "tools": ANTH_TOOLS, "messages": [USER]})
    j = json.loads(raw)
    check("anthropic json: tool_use", st == 200 and ct.startswith("application/json")
          and j["content"][-1]["type"] == "tool_use" and j["stop_reason"] == "tool_use", j)
    st, ct, raw = post(c, "/v1/messages", {"model": "m", "messages": [USER]})
    check("anthropic json: no matching tool", json.loads(raw)["content"][0]["text"]
          == "FINAL: no tool")
    st, ct, raw = post(c, "/v1/messages/count_tokens?beta=true", {"model": "m", "messages": [USER]})
    check("count_tokens", st == 200 and "input_tokens" in json.loads(raw))

    chat_tools = [{"type": "function", "function": {"name": "echo", "parameters": {}}}]
    st, ct, raw = post(c, "/v1/chat/completions", {"model": "m", "stream": True,
                                                   "stream_options": {"include_usage": True},
                                                   "tools": chat_tools, "messages": [USER]})
    ev = sse_events(raw)
    check("chat stream: data-only, ends [DONE]", all(e is None for e, _ in ev)
          and ev[-1][1] == "[DONE]")
    args = "".join(tc["function"].get("arguments", "") for _, d in ev[:-1] if d["choices"]
                   for tc in d["choices"][0]["delta"].get("tool_calls", []))
    check("chat stream: tool_calls fragments", json.loads(args)["message"]
          == "hello from the fake model", args)
    check("chat stream: usage chunk with empty choices", ev[-2][1]["choices"] == []
          and ev[-2][1]["usage"]["total_tokens"] > 0)
    st, ct, raw = post(c, "/v1/chat/completions", {"model": "m", "messages": [
        USER, {"role": "tool", "tool_call_id": "x", "content": "Echo: c"}]})
    check("chat json: FINAL", json.loads(raw)["choices"][0]["message"]["content"]
          == "FINAL: Echo: c")

    ns_tools = [{"type": "function", "name": "shell"},
                {"type": "namespace", "name": "mcp__S", "tools": [
                    {"type": "function", "name": "echo", "parameters": {}}]}]
    st, ct, raw = post(c, "/v1/responses", {"model": "m", "stream": True, "tools": ns_tools,
                                            "input": [{"type": "message", "role": "user",
                                                       "content": "hi"}]})
    ev = sse_events(raw)
    check("responses stream: sequence_number 0..n", [d["sequence_number"] for _, d in ev]
          == list(range(len(ev))))
    done = [d for e, d in ev if e == "response.output_item.done"][0]["item"]
    check("responses stream: namespaced function_call", done["type"] == "function_call"
          and done["namespace"] == "mcp__S" and done["name"] == "echo", done)
    check("responses stream: completed with usage", ev[-1][0] == "response.completed"
          and ev[-1][1]["response"]["usage"]["total_tokens"] > 0)
    st, ct, raw = post(c, "/v1/responses", {"model": "m", "tools": ns_tools, "input": [
        {"type": "function_call_output", "call_id": "c",
         "output": [{"type": "input_text", "text": "Echo: r"}]}]})
    j = json.loads(raw)
    check("responses json: FINAL", j["output"][0]["content"][0]["text"] == "FINAL: Echo: r", j)

    gem_tools = [{"functionDeclarations": [{"name": "mcp_S_echo"}]}]
    st, ct, raw = post(c, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
                       {"tools": gem_tools, "contents": [{"role": "user", "parts": [{"text": "h"}]}]})
    ev = sse_events(raw)
    fc = ev[0][1]["candidates"][0]["content"]["parts"][0]["functionCall"]
    check("gemini stream: functionCall", fc["name"] == "mcp_S_echo", ev)
    st, ct, raw = post(c, "/p/v1beta/models/gemini-x:generateContent", {"contents": [
        {"role": "user", "parts": [{"functionResponse": {"name": "mcp_S_echo",
                                                         "response": {"output": "Echo: g"}}}]}]})
    check("gemini json: FINAL", json.loads(raw)["candidates"][0]["content"]["parts"][0]["text"]
          == "FINAL: Echo: g")

    # gzip-encoded request body
    st, ct, raw = post(c, "/v1/messages", gzip.compress(json.dumps(
        {"model": "m", "tools": ANTH_TOOLS, "messages": [USER]}).encode()),
        {"Content-Encoding": "gzip"})
    check("gzip request body decoded", json.loads(raw)["stop_reason"] == "tool_use")
    c.close()
    recs = p.records()
    check("log: one connection for the keep-alive session",
          sum(1 for r in recs if "connection" in r) == 1, recs[:2])
    check("log: every request logged with headers and body", all(
        "headers" in r and "body" in r for r in recs if "request" in r)
        and sum(1 for r in recs if "request" in r) == 14, [r.get("path") for r in recs])
    # determinism: the same request answers byte for byte the same
    c = p.conn()
    a = post(c, "/v1/responses", {"model": "m", "stream": True, "tools": ns_tools, "input": []})
    b = post(c, "/v1/responses", {"model": "m", "stream": True, "tools": ns_tools, "input": []})
    check("deterministic answers", a == b)
    c.close()
    p.close()

    # --- faults ---
    p = Provider("--tool", "echo", "--fault", "overload-once")
    c = p.conn()
    st, _, raw = post(c, "/v1/messages", {"model": "m", "stream": True, "messages": [USER]})
    check("overload-once: anthropic 529 overloaded_error", st == 529
          and json.loads(raw)["error"]["type"] == "overloaded_error")
    st, _, raw = post(c, "/v1/messages", {"model": "m", "stream": True, "messages": [USER]})
    check("overload-once: then normal", st == 200)
    p.close()
    p = Provider("--fault", "overload-once")
    c = p.conn()
    st, _, raw = post(c, "/v1/chat/completions", {"model": "m", "messages": [USER]})
    check("overload-once: openai 429 JSON error", st == 429
          and json.loads(raw)["error"]["code"] == "rate_limit_exceeded")
    p.close()

    p = Provider("--tool", "echo", "--fault", "cut-stream-once")
    c = p.conn()
    c.request("POST", "/v1/messages", json.dumps({"model": "m", "stream": True,
                                                  "tools": ANTH_TOOLS, "messages": [USER]}))
    r = c.getresponse()
    try:
        r.read()
        cut = False
    except http.client.IncompleteRead as e:
        cut = b"message_start" in e.partial and b"message_stop" not in e.partial
    check("cut-stream-once: stream closed mid-body", cut)
    c = p.conn()
    st, _, raw = post(c, "/v1/messages", {"model": "m", "stream": True, "tools": ANTH_TOOLS,
                                          "messages": [USER]})
    check("cut-stream-once: then complete", b"message_stop" in raw)
    p.close()

    p = Provider("--tool", "echo", "--fault", "event-error-once")
    c = p.conn()
    st, _, raw = post(c, "/v1/messages", {"model": "m", "stream": True, "messages": [USER]})
    ev = sse_events(raw)
    check("event-error-once: message_start then event: error",
          [e for e, _ in ev] == ["message_start", "error"]
          and ev[1][1]["error"]["type"] == "overloaded_error", ev)
    st, _, raw = post(c, "/v1/messages", {"model": "m", "stream": True, "messages": [USER]})
    check("event-error-once: then normal", sse_events(raw)[-1][0] == "message_stop")
    p.close()

    passed, failed = RESULTS.count(True), RESULTS.count(False)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
