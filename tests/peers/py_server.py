#!/usr/bin/env python3
"""Fixture MCP server for mcptape's integration tests (official Python SDK, mcp==2.3.0).

Built on ``mcp.server.mcpserver.MCPServer`` (formerly FastMCP). The SDK serves both protocol
eras on the same stdio connection: the legacy ``initialize`` handshake (up to 2025-11-25) and
the stateless 2026-07-28 era (``server/discover`` + per-request ``_meta``).

Usage:
    python py_server.py                      # stdio (default)
    python py_server.py --http --port 8765   # streamable HTTP on 127.0.0.1:8765/mcp
    python py_server.py --http --port 0      # a port of the kernel's choosing, said on stderr:
                                             # "mcptape-test-upstream listening on port N"

Everything this server answers is deterministic, except ``counter`` which deliberately returns
1, 2, 3, ... per process, so identical repeated calls get different answers (a recorder replaying
by request content alone must keep call order), and ``now`` which returns the current time and a
fresh UUID (volatile fields a checker must mask).

Drift mode (``FIXTURE_DRIFT=1`` in the environment): the same ``tools/list``, different behaviour,
for ``mcptape check`` tests: ``add`` answers a+b+1 (value change), ``weather`` adds a field to its
structured output (structure change), ``echo`` fails with a JSON-RPC error (error-status change),
``progress_steps`` fails as a tool error (``isError: true``), ``resources/list`` lists its resources
in reverse order (ordering change), ``slow_echo`` sleeps 4 s longer (missing response under a short
``--timeout``), ``counter`` makes the process exit without answering (a crash). Without the
variable nothing changes.
Diagnostics go to stderr only; stdout carries MCP messages only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from datetime import datetime, timezone
from typing import Annotated

from mcp_types import CreateMessageResult, SamplingMessage, TextContent
from pydantic import BaseModel, Field

from mcp.server.mcpserver import Context, MCPServer, Resolve, Sample
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

DRIFT = os.environ.get("FIXTURE_DRIFT") == "1"

mcp = MCPServer(
    name="mcptape-fixture",
    version="1.0.0",
    instructions="Fixture server for mcptape integration tests.",
    # Keep the SDK's own logging quiet and on stderr.
    log_level="WARNING",
)

_counter = 0


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b + 1 if DRIFT else a + b


@mcp.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    if DRIFT:
        raise MCPError(code=-32603, message="echo is broken in this build")
    return f"echo: {text}"


@mcp.tool()
def counter() -> int:
    """Return 1, 2, 3, ... : one more on every call, per server process."""
    global _counter
    if DRIFT:
        os._exit(3)  # a crash mid-call: the caller never gets an answer
    _counter += 1
    return _counter


@mcp.tool()
async def slow_echo(text: str, delay_ms: int) -> str:
    """Sleep delay_ms milliseconds, then echo the text (for concurrency tests)."""
    await asyncio.sleep(max(0, delay_ms) / 1000.0 + (4.0 if DRIFT else 0.0))
    return f"slow_echo: {text} after {delay_ms}ms"


class Weather(BaseModel):
    city: str
    temperature_c: float
    conditions: str


_WEATHER = {
    "Paris": Weather(city="Paris", temperature_c=18.5, conditions="Cloudy"),
    "Oslo": Weather(city="Oslo", temperature_c=4.0, conditions="Snow"),
}


class _DriftedWeather(Weather):
    # A subclass keeps its own fields on the wire: the published outputSchema is unchanged.
    humidity_pct: int = 80


@mcp.tool()
def weather(city: str) -> Weather:
    """Structured output: a fixed weather report (outputSchema + structuredContent)."""
    w = _WEATHER.get(city, Weather(city=city, temperature_c=20.0, conditions="Unknown"))
    return _DriftedWeather(**w.model_dump()) if DRIFT else w


class Clock(BaseModel):
    label: str
    stamp: str
    id: str
    created_at: float


class Deployment(BaseModel):
    service: str
    replicas: float
    authorized: bool


@mcp.tool()
def deploy(
    service: str,
    api_key: Annotated[
        str, Field(description="API key (OAuth2 client secret, base64-encoded, 60calls/minute)")
    ],
    token: Annotated[str, Field(description="Deploy token; expires every 90days.")],
    replicas: float = 1.0,
) -> Deployment:
    """Arguments named like secrets (redacted on the tape, schema kept): authorized only with a
    real-looking key and token, so a replay that sends a redaction marker is told apart.

    The token is an OAuth2 bearer token, rotated every 90days; the password of the registry
    is hashed with argon2id."""
    ok = api_key.startswith("sk-") and token.startswith("ghp_")
    return Deployment(service=service, replicas=replicas, authorized=ok)


@mcp.tool()
def now() -> Clock:
    """Volatile on purpose: the current time (ISO 8601 and epoch seconds) and a fresh UUID."""
    return Clock(
        label="fixture clock",
        stamp=datetime.now(timezone.utc).isoformat(),
        id=str(uuid.uuid4()),
        created_at=time.time(),
    )


@mcp.tool()
async def touch_tools(ctx: Context) -> str:
    """Announce a tools list change to `subscriptions/listen` subscribers (2026-07-28)."""
    await ctx.notify_tools_changed()
    return "announced"


@mcp.tool()
async def progress_steps(steps: int, ctx: Context) -> str:
    """Send `steps` progress notifications (progress 1..steps, total steps), then answer."""
    if DRIFT:
        raise ToolError("progress_steps is broken in this build")
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}/{steps}")
        await asyncio.sleep(0.01)
    return f"done {steps} steps"


def _ask_llm(topic: str) -> Sample:
    return Sample(
        [SamplingMessage(role="user", content=TextContent(type="text", text=f"Write one line about {topic}."))],
        max_tokens=50,
        system_prompt="You are the mcptape fixture.",
    )


@mcp.tool()
def ask_llm(topic: str, answer: Annotated[CreateMessageResult, Resolve(_ask_llm)]) -> str:
    """Sample the client's LLM. Legacy era: a sampling/createMessage request mid-call;
    2026-07-28: an input_required result, then the client retries with inputResponses."""
    text = answer.content.text if isinstance(answer.content, TextContent) else str(answer.content)
    return f"llm said: {text} (model {answer.model})"


def greeting() -> str:
    """A static text resource."""
    return "Hello from the mcptape fixture server."


def config() -> dict[str, object]:
    """A static JSON resource."""
    return {"name": "mcptape-fixture", "features": ["tools", "resources", "prompts"], "version": 1}


# resources/list answers in registration order: drift mode registers them the other way round.
_STATIC_RESOURCES = [
    (greeting, "fixture://greeting", "greeting", "text/plain"),
    (config, "fixture://config", "config", "application/json"),
]
for _fn, _uri, _name, _mime in reversed(_STATIC_RESOURCES) if DRIFT else _STATIC_RESOURCES:
    mcp.resource(_uri, name=_name, mime_type=_mime)(_fn)


@mcp.resource("fixture://items/{item_id}", name="item", mime_type="text/plain")
def item(item_id: str) -> str:
    """A templated resource."""
    return f"item {item_id}"


@mcp.prompt()
def review(code: str, language: str = "python") -> str:
    """Ask for a review of a piece of code."""
    return f"Please review this {language} code:\n\n{code}"


LISTENING_ON = "mcptape-test-upstream listening on port "


def serve_http(app, port: int, what: str) -> None:
    """Serves the ASGI `app` on 127.0.0.1:`port` (0: a port of the kernel's choosing), saying on
    stderr which port once the socket listens (connections queue from then on), with a line of
    LISTENING_ON the tests read: a port picked free beforehand could be taken by another test's
    server before this one bound it."""
    import socket

    import anyio
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    port = sock.getsockname()[1]
    print(f"py_server: {what} on 127.0.0.1:{port}", file=sys.stderr)
    print(f"{LISTENING_ON}{port}", file=sys.stderr, flush=True)
    # As MCPServer.run would (it takes a port, not a socket).
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level=mcp.settings.log_level.lower())
    anyio.run(uvicorn.Server(config).serve, [sock])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--sse", action="store_true", help="serve the HTTP+SSE transport (2024-11-05)")
    parser.add_argument("--port", type=int, default=8765, help="with --http or --sse (0: the kernel's choice)")
    args = parser.parse_args()
    if args.sse:
        serve_http(mcp.sse_app(host="127.0.0.1"), args.port, "HTTP+SSE")
    elif args.http:
        serve_http(mcp.streamable_http_app(host="127.0.0.1"), args.port, "streamable HTTP")
    else:
        mcp.run()


if __name__ == "__main__":
    main()
