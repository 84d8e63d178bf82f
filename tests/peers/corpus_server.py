#!/usr/bin/env python3
"""Corpus server for mcptape's end-to-end redaction tests (tests/it/corpus_e2e.rs).

Serves the texts of a config file in every position a server puts data in: tool results (text
content and structuredContent), JSON inside a text result, resource contents (text and base64
`blob`), log notifications, JSON-RPC error messages and data. Also answers tools with answers
given verbatim (raw JSON text, so `2.50` stays `2.50`).

Usage:
    python corpus_server.py stdio CONFIG [ARGS...]   # plain JSON-RPC over stdio, standard library only
    python corpus_server.py http PORT CONFIG         # the official SDK (MCPServer), Streamable HTTP on 127.0.0.1

Over HTTP, PORT 0 binds a port of the kernel's choosing; once the socket listens the server says
which on stderr: "mcptape-test-upstream listening on port N".

CONFIG is a JSON file: {"texts": [str, ...], "answers": {tool name: raw JSON text of its result}}.
ARGS after CONFIG are ignored (the tests put secrets on the command line, where mcptape records it).

Both modes serve the same surface:
    tools/call results                -> content: one text item per text; structuredContent {"outputs": texts}
    tools/call nested                 -> content: one text item per text, each the JSON text {"config": {"value": text, "n": 2.5}}
    tools/call log                    -> one notifications/message (level warning, logger app, data text) per text, then a result
    tools/call fail {"i": I}          -> JSON-RPC error -32000, message texts[I], data {"detail": texts[I]}
    tools/call echo {"inputs": [...]} -> "ok" (the arguments are not echoed)
    resources/read corpus://texts     -> one text content per text
    resources/read corpus://blobs     -> one blob content per text (base64 of its UTF-8)
    tools/call NAME in answers        -> that raw result (stdio only)
Over stdio every message is written as compact JSON (`mcptape play` re-renders a message's top
level compactly around the recorded values, so a compact server's transcript replays byte for
byte). Stdout carries MCP messages only; diagnostics go to stderr.
"""

import base64
import json
import sys


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def nested(text: str) -> str:
    return json.dumps({"config": {"value": text, "n": 2.5}})


# --- stdio: plain JSON-RPC, every byte written as given ----------------------------------------


def serve_stdio(cfg: dict) -> None:
    texts: list[str] = cfg.get("texts", [])
    answers: dict[str, str] = cfg.get("answers", {})
    out = sys.stdout.buffer

    def write(obj_or_raw) -> None:
        raw = obj_or_raw if isinstance(obj_or_raw, str) else json.dumps(obj_or_raw, separators=(",", ":"))
        out.write(raw.encode("utf-8") + b"\n")

    def result(rid, raw_result: str) -> None:
        write('{"jsonrpc":"2.0","id":%s,"result":%s}' % (json.dumps(rid), raw_result))

    for line in sys.stdin.buffer:
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if not isinstance(m, dict) or "id" not in m or "method" not in m:
            continue
        rid, method, params = m["id"], m["method"], m.get("params") or {}
        if method == "initialize":
            r = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}, "resources": {}, "logging": {}},
                "serverInfo": {"name": "corpus", "version": "1"},
            }
        elif method == "tools/call":
            name, args = params.get("name"), params.get("arguments") or {}
            if name in answers:
                result(rid, answers[name])
                out.flush()
                continue
            if name == "results":
                r = {
                    "content": [{"type": "text", "text": t} for t in texts],
                    "structuredContent": {"outputs": texts},
                    "isError": False,
                }
            elif name == "nested":
                r = {"content": [{"type": "text", "text": nested(t)} for t in texts]}
            elif name == "log":
                for t in texts:
                    write({"jsonrpc": "2.0", "method": "notifications/message",
                           "params": {"level": "warning", "logger": "app", "data": t}})
                r = {"content": [{"type": "text", "text": "logged %d" % len(texts)}]}
            elif name == "fail":
                t = texts[int(args["i"])]
                write({"jsonrpc": "2.0", "id": rid,
                       "error": {"code": -32000, "message": t, "data": {"detail": t}}})
                out.flush()
                continue
            else:
                r = {"content": [{"type": "text", "text": "ok"}]}
        elif method == "resources/read":
            uri = params.get("uri")
            if uri == "corpus://texts":
                r = {"contents": [{"uri": "corpus://texts/%d" % i, "mimeType": "text/plain", "text": t}
                                  for i, t in enumerate(texts)]}
            elif uri == "corpus://blobs":
                r = {"contents": [{"uri": "corpus://blobs/%d" % i, "mimeType": "application/octet-stream",
                                   "blob": base64.b64encode(t.encode("utf-8")).decode("ascii")}
                                  for i, t in enumerate(texts)]}
            else:
                write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "no such resource"}})
                out.flush()
                continue
        else:
            r = {}
        write({"jsonrpc": "2.0", "id": rid, "result": r})
        out.flush()


# --- http: the official SDK ------------------------------------------------------------------


def serve_http(port: int, cfg: dict) -> None:
    from mcp_types import CallToolResult, TextContent

    from mcp.server.lowlevel.helper_types import ReadResourceContents
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.shared.exceptions import MCPError

    import warnings

    warnings.simplefilter("ignore")  # the legacy era's logging capability is deprecated in 2026-07-28
    texts: list[str] = cfg.get("texts", [])

    class CorpusServer(MCPServer):
        async def read_resource(self, uri, context=None):
            if str(uri) == "corpus://texts":
                return [ReadResourceContents(content=t, mime_type="text/plain", meta=None) for t in texts]
            if str(uri) == "corpus://blobs":
                return [ReadResourceContents(content=t.encode("utf-8"), mime_type="application/octet-stream", meta=None)
                        for t in texts]
            return await super().read_resource(uri, context)

    mcp = CorpusServer(name="corpus", version="1", log_level="WARNING")

    @mcp.tool()
    def results() -> CallToolResult:
        """Every text as a text item and in structuredContent."""
        return CallToolResult(
            content=[TextContent(type="text", text=t) for t in texts],
            structured_content={"outputs": texts},
        )

    def nested_json() -> CallToolResult:
        """Every text inside JSON inside a text item."""
        return CallToolResult(content=[TextContent(type="text", text=nested(t)) for t in texts])

    mcp.add_tool(nested_json, name="nested")

    @mcp.tool()
    async def log(ctx: Context) -> str:
        """Every text as a log notification."""
        for t in texts:
            await ctx.log("warning", t, logger_name="app")
        return "logged %d" % len(texts)

    @mcp.tool()
    def fail(i: int) -> str:
        """A JSON-RPC error whose message and data are text i."""
        raise MCPError(code=-32000, message=texts[i], data={"detail": texts[i]})

    @mcp.tool()
    def echo(inputs: list[str]) -> str:
        """Takes the texts, says ok."""
        return "ok"

    @mcp.resource("corpus://texts", name="texts", mime_type="text/plain")
    def texts_resource() -> str:
        return ""

    @mcp.resource("corpus://blobs", name="blobs", mime_type="application/octet-stream")
    def blobs_resource() -> bytes:
        return b""

    import socket

    import anyio
    import uvicorn

    # Bound here, not by MCPServer.run (which takes a port, not a socket), to say the port.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)  # connections queue from here on
    port = sock.getsockname()[1]
    print(f"corpus_server: streamable HTTP on 127.0.0.1:{port}", file=sys.stderr)
    print(f"mcptape-test-upstream listening on port {port}", file=sys.stderr, flush=True)
    config = uvicorn.Config(
        mcp.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=port, log_level=mcp.settings.log_level.lower()
    )
    anyio.run(uvicorn.Server(config).serve, [sock])


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "stdio":
        serve_stdio(load(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "http":
        serve_http(int(sys.argv[2]), load(sys.argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
