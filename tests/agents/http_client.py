#!/usr/bin/env python3
"""A plain HTTP client (standard library only) for the model proxy tests; prints one JSON document.

  http_client.py secrets BASE_URL SECRET
      Gemini streamGenerateContent?alt=sse (2 calls) and OpenAI Chat Completions (a streamed and
      a whole call), with SECRET in the user's text, in a tool call's arguments and in the API key
      headers. Prints each answer as parsed here: the SSE data lines as JSON, whole bodies as JSON.
  http_client.py raw BASE_URL PATH BODY_FILE
      POSTs BODY_FILE to BASE_URL+PATH with http.client and reports how the answer ended:
      status, content type, the events read, and `ended`: "complete" or the error that cut it
      (also when it came before the response head: then status is null).
"""

import http.client
import json
import sys
import urllib.request
from urllib.parse import urlsplit

ECHO = {"type": "object", "properties": {"message": {"type": "string"}}}


def post(url, body, headers):
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers=dict({"Content-Type": "application/json"}, **headers))
    with urllib.request.urlopen(req, timeout=30) as r:
        ctype = r.headers.get("Content-Type", "")
        if ctype.startswith("text/event-stream"):
            events = []
            for line in r:
                line = line.decode().rstrip("\r\n")
                if line.startswith("data: "):
                    d = line[len("data: "):]
                    events.append(d if d == "[DONE]" else json.loads(d))
            return {"status": r.status, "events": events}
        return {"status": r.status, "body": json.loads(r.read())}


def secrets(base, secret):
    out = {}
    g_headers = {"x-goog-api-key": secret}
    g_url = base + "/v1beta/models/gemini-fake:streamGenerateContent?alt=sse"
    user = {"role": "user", "parts": [{"text": f"My key is {secret}. Call echo."}]}
    tools = [{"functionDeclarations": [{"name": "echo", "description": "Echoes.",
                                        "parameters": ECHO}]}]
    out["gemini 1"] = post(g_url, {"contents": [user], "tools": tools}, g_headers)
    contents = [user,
                {"role": "model", "parts": [{"functionCall": {
                    "name": "echo", "args": {"api_key": secret, "message": "hi"}}}]},
                {"role": "user", "parts": [{"functionResponse": {
                    "name": "echo", "response": {"result": "Echo: hi"}}}]}]
    out["gemini 2"] = post(g_url, {"contents": contents, "tools": tools}, g_headers)

    c_headers = {"Authorization": f"Bearer {secret}"}
    c_url = base + "/v1/chat/completions"
    ctools = [{"type": "function", "function": {"name": "echo", "parameters": ECHO}}]
    ask = [{"role": "user", "content": f"My key is {secret}. Call echo."}]
    out["chat stream"] = post(c_url, {"model": "gpt-fake", "messages": ask, "tools": ctools,
                                      "stream": True}, c_headers)
    history = ask + [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function", "function": {
                "name": "echo", "arguments": json.dumps({"api_key": secret, "message": "hi"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Echo: hi"},
    ]
    out["chat"] = post(c_url, {"model": "gpt-fake", "messages": history, "tools": ctools},
                       c_headers)
    return out


def raw(base, path, body_file):
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    with open(body_file, "rb") as f:
        body = f.read()
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    try:
        r = conn.getresponse()
    except (http.client.HTTPException, ConnectionError, OSError) as e:
        return {"status": None, "content_type": None, "chunked": None, "data": "",
                "ended": f"{type(e).__name__} before the response head"}
    out = {"status": r.status, "content_type": r.headers.get("Content-Type"),
           "chunked": r.chunked, "data": ""}
    try:
        while True:
            piece = r.read1(65536)
            if not piece:
                break
            out["data"] += piece.decode()
        out["ended"] = "complete"
    except (http.client.IncompleteRead, ConnectionError, OSError) as e:
        out["ended"] = f"{type(e).__name__}"
    return out


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "secrets":
        doc = secrets(sys.argv[2].rstrip("/"), sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "raw":
        doc = raw(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
    print(json.dumps(doc, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
