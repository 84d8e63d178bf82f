#!/usr/bin/env python3
"""Scripted fake LLM provider for recording real agent runs (standard library only).

Speaks, under any path prefix:
  Anthropic Messages   POST .../v1/messages[?beta=true], POST .../v1/messages/count_tokens
  OpenAI Chat          POST .../v1/chat/completions
  OpenAI Responses     POST .../v1/responses
  Gemini               POST .../v1beta/models/M:generateContent, :streamGenerateContent[?alt=sse]
  Anthropic on Vertex  POST .../v1/projects/P/locations/L/publishers/anthropic/models/M:rawPredict,
                       :streamRawPredict (M = count-tokens: count_tokens)
  Code Assist          POST .../v1internal:streamGenerateContent[?alt=sse], :generateContent (the
                       Gemini request wrapped as {"model","project","user_prompt_id","request"},
                       each answer as {"response": …, "traceId"}), :countTokens; its setup calls
                       (:loadCodeAssist answers a user already on the standard tier with the
                       project "fake-project"; :onboardUser, :listExperiments,
                       :retrieveUserQuota, :fetchAdminControls, :recordCodeAssistMetrics…) get
                       fixed answers, logged with "api": "codeassist-setup"
  GET/HEAD anything else -> 200 (preconnect probes); GET .../v1/models -> a one-model list.

Script: while the conversation holds no tool result, answer with a call to the first offered tool
whose name contains --tool (with the exact name the client offered); once it holds one, answer
"FINAL: <text of the last tool result, first 200 chars>". No matching tool: "FINAL: no tool".
Ids, timestamps and usage numbers are functions of the request's turn (number of tool results),
so two identical runs get byte-identical answers.

Usage: fake_provider.py [--port 0] [--tool echo] [--args JSON] [--fault KIND] [--log FILE]
The first stdout line is the base URL, http://127.0.0.1:PORT.
Faults, each once per process: overload-once (Anthropic 529 overloaded_error, OpenAI 429
rate_limit_exceeded, Gemini 503), server-error-once (500), cut-stream-once (the first 2 SSE
events, then the connection is shut down mid-body), event-error-once (Anthropic: message_start
then `event: error`; Responses: response.failed; Chat/Gemini: a data: {"error":...} line).
--log appends one JSON line per accepted connection ({"connection": n}) and per request.
"""

import argparse
import base64
import gzip
import json
import re
import socket
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, parse_qs

FAULTS = ("none", "overload-once", "server-error-once", "cut-stream-once", "event-error-once")
CREATED = 1700000000  # fixed "created" timestamp of every answer


class State:
    def __init__(self, opts):
        self.opts = opts
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = 0
        self.model_requests = 0
        self.stream_requests = 0
        self.fault_used = False
        self.t0 = time.monotonic()
        self.log_file = open(opts.log, "a", encoding="utf-8") if opts.log else None

    def log(self, record):
        if not self.log_file:
            return
        line = json.dumps(record, ensure_ascii=False)
        with self.lock:
            self.log_file.write(line + "\n")
            self.log_file.flush()

    def take_fault(self, kind):
        """True exactly once, for the fault KIND when it is the configured one."""
        if self.opts.fault != kind:
            return False
        with self.lock:
            if self.fault_used:
                return False
            self.fault_used = True
            return True


# ----------------------------------------------------------------------------------------------
# Script: what to answer, from the parsed request
# ----------------------------------------------------------------------------------------------

def text_of(x):
    """Best-effort plain text of a tool result in any of the wire shapes."""
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    if isinstance(x, list):
        return "\n".join(text_of(i) for i in x)
    if isinstance(x, dict):
        for key in ("text", "output", "content", "result", "response"):
            if key in x:
                return text_of(x[key])
        return json.dumps(x, ensure_ascii=False)
    return json.dumps(x)


class Plan:
    """kind: 'tool' (name, namespace, args) or 'final' (text); turn: number of tool results seen."""

    def __init__(self, kind, turn, text=None, name=None, namespace=None, args=None):
        self.kind, self.turn, self.text = kind, turn, text
        self.name, self.namespace, self.args = name, namespace, args


def decide(opts, offered, results):
    """offered: list of (match_name, wire_name, namespace); results: list of tool-result texts."""
    turn = len(results)
    if results:
        return Plan("final", turn, text="FINAL: " + results[-1][:200])
    if opts.tool:
        for match_name, wire_name, ns in offered:
            if opts.tool in match_name:
                return Plan("tool", turn, name=wire_name, namespace=ns, args=opts.args)
    return Plan("final", turn, text="FINAL: no tool")


def anthropic_scan(body):
    offered = [(t["name"], t["name"], None) for t in body.get("tools") or []
               if isinstance(t, dict) and isinstance(t.get("name"), str)]
    results = []
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results.append(text_of(block.get("content")))
    return offered, results


def chat_scan(body):
    offered = []
    for t in body.get("tools") or []:
        f = t.get("function") if isinstance(t, dict) else None
        if isinstance(f, dict) and isinstance(f.get("name"), str):
            offered.append((f["name"], f["name"], None))
    for f in body.get("functions") or []:
        if isinstance(f, dict) and isinstance(f.get("name"), str):
            offered.append((f["name"], f["name"], None))
    results = [text_of(m.get("content")) for m in body.get("messages") or []
               if isinstance(m, dict) and m.get("role") in ("tool", "function")]
    return offered, results


def responses_scan(body):
    offered = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "namespace":
            ns = t.get("name")
            for inner in t.get("tools") or []:
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    offered.append((f"{ns}__{inner['name']}", inner["name"], ns))
        elif isinstance(t.get("name"), str):
            offered.append((t["name"], t["name"], None))
    results = []
    inp = body.get("input")
    if isinstance(inp, list):
        for item in inp:
            if isinstance(item, dict) and item.get("type") in (
                    "function_call_output", "custom_tool_call_output", "mcp_call_output"):
                results.append(text_of(item.get("output")))
    return offered, results


def gemini_scan(body):
    offered = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        for f in t.get("functionDeclarations") or t.get("function_declarations") or []:
            if isinstance(f, dict) and isinstance(f.get("name"), str):
                offered.append((f["name"], f["name"], None))
    results = []
    for c in body.get("contents") or []:
        for p in (c.get("parts") or []) if isinstance(c, dict) else []:
            if isinstance(p, dict):
                fr = p.get("functionResponse") or p.get("function_response")
                if isinstance(fr, dict):
                    results.append(text_of(fr.get("response")))
    return offered, results


def pieces(s, n):
    """Split s into chunks of n characters (at least one chunk)."""
    return [s[i:i + n] for i in range(0, len(s), n)] or [""]


def usage_numbers(plan):
    inp = 100 + 50 * plan.turn
    out = 12 if plan.kind == "tool" else 8 + len(pieces(plan.text, 16))
    return inp, out


# ----------------------------------------------------------------------------------------------
# Wire renderers. Each returns a list of SSE event strings (stream) or a JSON object.
# ----------------------------------------------------------------------------------------------

def sse(event, data):
    payload = json.dumps(data, ensure_ascii=False)
    if event is None:
        return f"data: {payload}\n\n"
    return f"event: {event}\ndata: {payload}\n\n"


# --- Anthropic ---

def anthropic_ids(plan):
    return f"msg_fake_{plan.turn:02d}", f"toolu_fake_{plan.turn:02d}"


def anthropic_json(plan, model):
    mid, tid = anthropic_ids(plan)
    inp, out = usage_numbers(plan)
    if plan.kind == "tool":
        content = [{"type": "text", "text": f"Calling {plan.name}."},
                   {"type": "tool_use", "id": tid, "name": plan.name, "input": plan.args}]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": plan.text}]
        stop = "end_turn"
    return {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": inp, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": out}}


def anthropic_events(plan, model, error_after_start=False):
    mid, tid = anthropic_ids(plan)
    inp, out = usage_numbers(plan)
    ev = [sse("message_start", {"type": "message_start", "message": {
        "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": inp, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "output_tokens": 1}}})]
    if error_after_start:
        ev.append(sse("error", {"type": "error", "error": {
            "type": "overloaded_error", "message": "Overloaded"}}))
        return ev
    ev.append(sse("ping", {"type": "ping"}))

    def text_block(index, text):
        out_ev = [sse("content_block_start", {"type": "content_block_start", "index": index,
                                              "content_block": {"type": "text", "text": ""}})]
        for p in pieces(text, 16):
            out_ev.append(sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                      "delta": {"type": "text_delta", "text": p}}))
        out_ev.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        return out_ev

    if plan.kind == "tool":
        ev += text_block(0, f"Calling {plan.name}.")
        ev.append(sse("content_block_start", {"type": "content_block_start", "index": 1,
                                              "content_block": {"type": "tool_use", "id": tid,
                                                                "name": plan.name, "input": {}}}))
        for p in [""] + pieces(json.dumps(plan.args, ensure_ascii=False), 12):
            ev.append(sse("content_block_delta", {"type": "content_block_delta", "index": 1,
                                                  "delta": {"type": "input_json_delta",
                                                            "partial_json": p}}))
        ev.append(sse("content_block_stop", {"type": "content_block_stop", "index": 1}))
        stop = "tool_use"
    else:
        ev += text_block(0, plan.text)
        stop = "end_turn"
    ev.append(sse("message_delta", {"type": "message_delta",
                                    "delta": {"stop_reason": stop, "stop_sequence": None},
                                    "usage": {"output_tokens": out}}))
    ev.append(sse("message_stop", {"type": "message_stop"}))
    return ev


# --- OpenAI Chat Completions ---

def chat_json(plan, model):
    inp, out = usage_numbers(plan)
    if plan.kind == "tool":
        msg = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [{
            "id": f"call_fake_{plan.turn:02d}", "type": "function",
            "function": {"name": plan.name, "arguments": json.dumps(plan.args, ensure_ascii=False)}}]}
        finish = "tool_calls"
    else:
        msg = {"role": "assistant", "content": plan.text, "refusal": None}
        finish = "stop"
    return {"id": f"chatcmpl-fake-{plan.turn:02d}", "object": "chat.completion", "created": CREATED,
            "model": model, "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish}],
            "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}}


def chat_events(plan, model, include_usage, error_mid=False):
    inp, out = usage_numbers(plan)
    base = {"id": f"chatcmpl-fake-{plan.turn:02d}", "object": "chat.completion.chunk",
            "created": CREATED, "model": model, "system_fingerprint": "fp_fake"}

    def chunk(delta, finish=None):
        c = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None,
                                 "finish_reason": finish}])
        if include_usage:
            c["usage"] = None
        return sse(None, c)

    ev = [chunk({"role": "assistant", "content": "" if plan.kind == "final" else None,
                 "refusal": None})]
    if error_mid:
        ev.append(sse(None, {"error": {"message": "The server had an error while processing your "
                                                  "request.", "type": "server_error",
                                       "param": None, "code": "server_error"}}))
        return ev
    if plan.kind == "tool":
        ev.append(chunk({"tool_calls": [{"index": 0, "id": f"call_fake_{plan.turn:02d}",
                                         "type": "function",
                                         "function": {"name": plan.name, "arguments": ""}}]}))
        for p in pieces(json.dumps(plan.args, ensure_ascii=False), 12):
            ev.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}))
        ev.append(chunk({}, "tool_calls"))
    else:
        for p in pieces(plan.text, 16):
            ev.append(chunk({"content": p}))
        ev.append(chunk({}, "stop"))
    if include_usage:
        ev.append(sse(None, dict(base, choices=[], usage={
            "prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0}})))
    ev.append("data: [DONE]\n\n")
    return ev


# --- OpenAI Responses ---

def responses_items(plan):
    if plan.kind == "tool":
        item = {"type": "function_call", "id": f"fc_fake_{plan.turn:02d}",
                "call_id": f"call_fake_{plan.turn:02d}", "name": plan.name,
                "arguments": json.dumps(plan.args, ensure_ascii=False), "status": "completed"}
        if plan.namespace:
            item["namespace"] = plan.namespace
        return [item]
    return [{"type": "message", "id": f"msg_fake_{plan.turn:02d}", "status": "completed",
             "role": "assistant",
             "content": [{"type": "output_text", "text": plan.text, "annotations": []}]}]


def responses_object(plan, model, status, output, usage):
    return {"id": f"resp_fake_{plan.turn:02d}", "object": "response", "created_at": CREATED,
            "status": status, "error": None, "incomplete_details": None, "model": model,
            "output": output, "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
            "usage": usage}


def responses_usage(plan):
    inp, out = usage_numbers(plan)
    return {"input_tokens": inp, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": inp + out}


def responses_json(plan, model):
    return responses_object(plan, model, "completed", responses_items(plan), responses_usage(plan))


def responses_events(plan, model, error_mid=False):
    seq = [0]
    ev = []

    def emit(data):
        data = dict(data, sequence_number=seq[0])
        seq[0] += 1
        ev.append(sse(data["type"], data))

    emit({"type": "response.created",
          "response": responses_object(plan, model, "in_progress", [], None)})
    emit({"type": "response.in_progress",
          "response": responses_object(plan, model, "in_progress", [], None)})
    if error_mid:
        emit({"type": "response.failed", "response": dict(
            responses_object(plan, model, "failed", [], None),
            error={"code": "server_error", "message": "The server had an error while processing "
                                                      "your request."})})
        return ev
    item = responses_items(plan)[0]
    if plan.kind == "tool":
        added = dict(item, arguments="", status="in_progress")
        emit({"type": "response.output_item.added", "output_index": 0, "item": added})
        for p in pieces(item["arguments"], 12):
            emit({"type": "response.function_call_arguments.delta", "item_id": item["id"],
                  "output_index": 0, "delta": p})
        emit({"type": "response.function_call_arguments.done", "item_id": item["id"],
              "output_index": 0, "name": item["name"], "arguments": item["arguments"]})
        emit({"type": "response.output_item.done", "output_index": 0, "item": item})
    else:
        emit({"type": "response.output_item.added", "output_index": 0,
              "item": dict(item, status="in_progress", content=[])})
        empty = {"type": "output_text", "text": "", "annotations": []}
        emit({"type": "response.content_part.added", "item_id": item["id"], "output_index": 0,
              "content_index": 0, "part": empty})
        for p in pieces(plan.text, 16):
            emit({"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                  "content_index": 0, "delta": p, "logprobs": []})
        emit({"type": "response.output_text.done", "item_id": item["id"], "output_index": 0,
              "content_index": 0, "text": plan.text, "logprobs": []})
        emit({"type": "response.content_part.done", "item_id": item["id"], "output_index": 0,
              "content_index": 0, "part": item["content"][0]})
        emit({"type": "response.output_item.done", "output_index": 0, "item": item})
    emit({"type": "response.completed",
          "response": responses_object(plan, model, "completed", [item], responses_usage(plan))})
    return ev


# --- Gemini ---

def gemini_chunks(plan, model):
    inp, out = usage_numbers(plan)
    usage = {"promptTokenCount": inp, "candidatesTokenCount": out, "totalTokenCount": inp + out}
    rid = f"fake-{plan.turn:02d}"
    if plan.kind == "tool":
        parts_list = [[{"functionCall": {"name": plan.name, "args": plan.args}}]]
    else:
        parts_list = [[{"text": p}] for p in pieces(plan.text, 16)]
    chunks = []
    for i, parts in enumerate(parts_list):
        cand = {"content": {"parts": parts, "role": "model"}, "index": 0}
        last = i == len(parts_list) - 1
        if last:
            cand["finishReason"] = "STOP"
        c = {"candidates": [cand], "modelVersion": model, "responseId": rid}
        c["usageMetadata"] = usage if last else {"promptTokenCount": inp,
                                                 "totalTokenCount": inp}
        chunks.append(c)
    return chunks


def gemini_json(plan, model):
    chunks = gemini_chunks(plan, model)
    if len(chunks) == 1:
        return chunks[0]
    merged = json.loads(json.dumps(chunks[-1]))
    merged["candidates"][0]["content"]["parts"] = [{"text": plan.text}]
    return merged


# ----------------------------------------------------------------------------------------------
# HTTP
# ----------------------------------------------------------------------------------------------

# The Gemini API's path, and Vertex AI's (express: /v1beta1/publishers/google/models/M:…; with
# a project: /v1/projects/P/locations/L/publishers/google/models/M:…).
GEMINI_RE = re.compile(
    r"/v1(?:beta1?|alpha)?/(?:projects/[^/]+/locations/[^/]+/)?(?:publishers/google/)?"
    r"models/([^/:]+):(generateContent|streamGenerateContent)$"
)

# Gemini Code Assist (Gemini CLI signed in with Google): ${CODE_ASSIST_ENDPOINT}/v1internal:M.
CODE_ASSIST_RE = re.compile(r"/v1internal:([A-Za-z]+)$")

# Its setup and bookkeeping calls, answered as for a user already on a tier with a project.
CODE_ASSIST_SETUP = {
    "loadCodeAssist": {
        "currentTier": {"id": "standard-tier", "name": "Gemini Code Assist Standard",
                        "hasOnboardedPreviously": True},
        "allowedTiers": [{"id": "standard-tier", "name": "Gemini Code Assist Standard",
                          "isDefault": True, "hasOnboardedPreviously": True}],
        "cloudaicompanionProject": "fake-project",
    },
    "onboardUser": {"done": True, "response": {"cloudaicompanionProject": {"id": "fake-project"}}},
    "listExperiments": {"experimentIds": [], "flags": []},
    "retrieveUserQuota": {"buckets": []},
    "fetchAdminControls": {},
    "recordCodeAssistMetrics": {},
    "setCodeAssistGlobalUserSetting": {},
}

# Anthropic on Vertex AI: the Messages API with the model in the path, as Claude Code asks it.
VERTEX_ANTHROPIC_RE = re.compile(
    r"/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/([^/:]+):(rawPredict|streamRawPredict)$"
)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def version_string(self):
        return "fake-provider/1"

    def log_message(self, fmt, *args):  # quiet; the --log file is the record
        pass

    # --- plumbing ---

    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            raw = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                raw += self.rfile.read(size)
                self.rfile.readline()
        else:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        enc = (self.headers.get("Content-Encoding") or "").lower()
        try:
            if enc == "gzip":
                raw = gzip.decompress(raw)
            elif enc == "deflate":
                raw = zlib.decompress(raw)
        except Exception:
            pass
        self.body_bytes = len(raw)
        return raw

    def parsed(self, raw):
        if not raw:
            return None, None
        try:
            return json.loads(raw), None
        except Exception:
            try:
                return None, raw.decode("utf-8")
            except UnicodeDecodeError:
                return None, "base64:" + base64.b64encode(raw).decode()

    def headers_dict(self):
        d = {}
        for k, v in self.headers.items():
            d[k] = d[k] + ", " + v if k in d else v
        return d

    def record(self, body_json, body_text, **extra):
        st = self.server.state
        with st.lock:
            st.requests += 1
            n = st.requests
        rec = {"request": n, "connection_id": getattr(self, "conn_id", None),
               "t": round(time.monotonic() - st.t0, 3), "method": self.command, "path": self.path,
               "headers": self.headers_dict(), "body_bytes": getattr(self, "body_bytes", 0)}
        rec["body"] = body_json if body_json is not None else body_text
        rec.update(extra)
        st.log(rec)

    def send_json(self, status, obj, extra_headers=()):
        data = json.dumps(obj, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra_headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.wfile.flush()

    def send_sse(self, events, cut=False, extra_headers=()):
        """Chunked text/event-stream, one chunk per event, flushed. cut: close mid-stream."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in extra_headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.flush()
        if cut:
            events = events[:2]  # before any content: e.g. message_start + ping
        for e in events:
            b = e.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
            self.wfile.flush()
        if cut:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # --- verbs ---

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self.read_body()
        path = urlsplit(self.path).path
        if (self.headers.get("Upgrade") or "").lower() == "websocket":
            # 426: codex's built-in provider then falls back to HTTP POST at once (404: ~7 s)
            self.record(None, None, status=426, reply="websocket refused")
            return self.send_json(426, {"error": {"message": "websocket not supported",
                                                  "type": "invalid_request_error"}})
        if path.rstrip("/").endswith("/models"):
            self.record(None, None, status=200, reply="models")
            return self.send_json(200, {"object": "list", "data": [{
                "id": "fake-model", "object": "model", "type": "model", "created": CREATED,
                "created_at": "2023-11-14T22:13:20Z", "display_name": "Fake Model",
                "owned_by": "fake"}], "has_more": False, "first_id": "fake-model",
                "last_id": "fake-model"})
        self.record(None, None, status=200, reply="ok")
        self.send_json(200, {"ok": True})

    def do_OTHER(self):
        raw = self.read_body()
        bj, bt = self.parsed(raw)
        self.record(bj, bt, status=405, reply="method not allowed")
        self.send_json(405, {"error": {"message": "method not allowed"}})

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_OTHER

    def do_POST(self):
        raw = self.read_body()
        body, text = self.parsed(raw)
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        st = self.server.state
        b = body if isinstance(body, dict) else {}

        vertex = VERTEX_ANTHROPIC_RE.search(path)
        if path.endswith("/v1/messages/count_tokens") or (vertex and vertex.group(1) == "count-tokens"):
            self.record(body, text, status=200, reply="count_tokens")
            # A function of the request, so each counted request has its own answer.
            return self.send_json(200, {"input_tokens": max(1, len(raw) // 4)})

        api = model = None
        code_assist = CODE_ASSIST_RE.search(path)
        if code_assist and code_assist.group(1) not in ("streamGenerateContent", "generateContent"):
            method = code_assist.group(1)
            if method == "countTokens":
                reply = {"totalTokens": max(1, len(raw) // 4)}
            else:
                reply = CODE_ASSIST_SETUP.get(method, {})
            self.record(body, text, status=200, reply=method, api="codeassist-setup")
            return self.send_json(200, reply)
        if code_assist:
            # The Gemini request, wrapped; the answer is wrapped the same way below.
            api, model = "codeassist", b.get("model", "fake-model")
            inner = b.get("request") if isinstance(b.get("request"), dict) else {}
            offered, results = gemini_scan(inner)
            stream = code_assist.group(1) == "streamGenerateContent"
        elif path.endswith("/v1/messages") or vertex:
            api, model = "anthropic", (vertex.group(1) if vertex else b.get("model", "fake-model"))
            offered, results = anthropic_scan(b)
            stream = bool(b.get("stream"))
        elif path.endswith("/chat/completions"):
            api, model = "chat", b.get("model", "fake-model")
            offered, results = chat_scan(b)
            stream = bool(b.get("stream"))
        elif path.endswith("/responses"):
            api, model = "responses", b.get("model", "fake-model")
            offered, results = responses_scan(b)
            stream = bool(b.get("stream"))
        else:
            m = GEMINI_RE.search(path)
            if m:
                api, model = "gemini", m.group(1)
                offered, results = gemini_scan(b)
                stream = m.group(2) == "streamGenerateContent"
        if api is None:
            self.record(body, text, status=404, reply="unknown path")
            return self.send_json(404, {"error": {"message": f"unknown path {path}",
                                                  "type": "not_found_error"}})

        with st.lock:
            st.model_requests += 1
        plan = decide(st.opts, offered, results)
        reply = plan.kind + (f" {plan.name}" if plan.kind == "tool" else "")

        if st.take_fault("overload-once"):
            self.record(body, text, status=_overload_status(api), reply="fault overload-once")
            return self.send_overload(api)
        if st.take_fault("server-error-once"):
            self.record(body, text, status=500, reply="fault server-error-once")
            return self.send_server_error(api)
        cut = stream and st.take_fault("cut-stream-once")
        err = stream and not cut and st.take_fault("event-error-once")
        fault = " fault cut-stream-once" if cut else " fault event-error-once" if err else ""
        self.record(body, text, status=200, reply=reply + fault, api=api, stream=stream)

        if api == "anthropic":
            hdrs = [("request-id", f"req_fake_{plan.turn:02d}")]
            if stream:
                return self.send_sse(anthropic_events(plan, model, error_after_start=err), cut, hdrs)
            return self.send_json(200, anthropic_json(plan, model), hdrs)
        if api == "chat":
            if stream:
                inc = bool((b.get("stream_options") or {}).get("include_usage"))
                return self.send_sse(chat_events(plan, model, inc, error_mid=err), cut)
            return self.send_json(200, chat_json(plan, model))
        if api == "responses":
            if stream:
                return self.send_sse(responses_events(plan, model, error_mid=err), cut)
            return self.send_json(200, responses_json(plan, model))
        if api == "codeassist":
            wrap = [{"response": c, "traceId": f"fake-trace-{plan.turn:02d}"}
                    for c in gemini_chunks(plan, model)]
            if stream:
                return self.send_sse([sse(None, w) for w in wrap], cut)
            return self.send_json(200, {"response": gemini_json(plan, model),
                                        "traceId": f"fake-trace-{plan.turn:02d}"})
        # gemini
        if stream and query.get("alt") == ["sse"]:
            evs = [sse(None, c) for c in gemini_chunks(plan, model)]
            if err:
                evs = evs[:1] + [sse(None, {"error": {"code": 503, "message": "The model is "
                                                      "overloaded.", "status": "UNAVAILABLE"}})]
            return self.send_sse(evs, cut)
        if stream:  # streamGenerateContent without alt=sse: one JSON array
            return self.send_json(200, gemini_chunks(plan, model))
        return self.send_json(200, gemini_json(plan, model))

    def send_overload(self, api):
        if api == "anthropic":
            return self.send_json(529, {"type": "error", "error": {
                "type": "overloaded_error", "message": "Overloaded"}},
                [("request-id", "req_fake_overload")])
        if api in ("gemini", "codeassist"):
            return self.send_json(503, {"error": {"code": 503, "message": "The model is "
                                                  "overloaded. Please try again later.",
                                                  "status": "UNAVAILABLE"}})
        return self.send_json(429, {"error": {
            "message": "Rate limit reached for requests. Please try again in 1ms.",
            "type": "requests", "param": None, "code": "rate_limit_exceeded"}},
            [("retry-after-ms", "1")])


    def send_server_error(self, api):
        if api == "anthropic":
            return self.send_json(500, {"type": "error", "error": {
                "type": "api_error", "message": "Internal server error"}},
                [("request-id", "req_fake_error")])
        if api in ("gemini", "codeassist"):
            return self.send_json(500, {"error": {"code": 500, "message": "Internal error "
                                                  "encountered.", "status": "INTERNAL"}})
        return self.send_json(500, {"error": {
            "message": "The server had an error while processing your request.",
            "type": "server_error", "param": None, "code": "server_error"}})


def _overload_status(api):
    return {"anthropic": 529, "gemini": 503, "codeassist": 503}.get(api, 429)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def process_request(self, request, client_address):
        st = self.state
        with st.lock:
            st.connections += 1
            n = st.connections
        self.conn_ids[id(request)] = n
        st.log({"connection": n, "t": round(time.monotonic() - st.t0, 3)})
        super().process_request(request, client_address)

    def finish_request(self, request, client_address):
        n = self.conn_ids.pop(id(request), None)

        class H(Handler):
            conn_id = n
        H(request, client_address, self)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--tool", default=None, help="substring of the offered tool name to call")
    ap.add_argument("--args", default='{"message":"hello from the fake model"}',
                    help="JSON object: the tool call's arguments")
    ap.add_argument("--fault", default="none", choices=FAULTS)
    ap.add_argument("--log", default=None, help="append one JSON line per connection/request")
    opts = ap.parse_args()
    opts.args = json.loads(opts.args)
    if not isinstance(opts.args, dict):
        ap.error("--args must be a JSON object")
    srv = Server(("127.0.0.1", opts.port), Handler)
    srv.state = State(opts)
    srv.conn_ids = {}
    print(f"http://127.0.0.1:{srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
