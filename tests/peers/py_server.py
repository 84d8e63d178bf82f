#!/usr/bin/env python3
"""Fixture MCP server for mcptape's integration tests (official Python SDK, mcp==2.3.0).

Built on ``mcp.server.mcpserver.MCPServer`` (formerly FastMCP). The SDK serves both protocol
eras on the same stdio connection: the legacy ``initialize`` handshake (up to 2025-11-25) and
the stateless 2026-07-28 era (``server/discover`` + per-request ``_meta``).

Usage:
    python py_server.py                      # stdio (default)
    python py_server.py --http --port 8765   # streamable HTTP on 127.0.0.1:8765/mcp

Everything this server answers is deterministic, except ``counter`` which deliberately returns
1, 2, 3, ... per process, so identical repeated calls get different answers (a recorder replaying
by request content alone must keep call order).
Diagnostics go to stderr only; stdout carries MCP messages only.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Annotated

from mcp_types import CreateMessageResult, SamplingMessage, TextContent
from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer, Resolve, Sample

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
    return a + b


@mcp.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@mcp.tool()
def counter() -> int:
    """Return 1, 2, 3, ... : one more on every call, per server process."""
    global _counter
    _counter += 1
    return _counter


@mcp.tool()
async def slow_echo(text: str, delay_ms: int) -> str:
    """Sleep delay_ms milliseconds, then echo the text (for concurrency tests)."""
    await asyncio.sleep(max(0, delay_ms) / 1000.0)
    return f"slow_echo: {text} after {delay_ms}ms"


class Weather(BaseModel):
    city: str
    temperature_c: float
    conditions: str


_WEATHER = {
    "Paris": Weather(city="Paris", temperature_c=18.5, conditions="Cloudy"),
    "Oslo": Weather(city="Oslo", temperature_c=4.0, conditions="Snow"),
}


@mcp.tool()
def weather(city: str) -> Weather:
    """Structured output: a fixed weather report (outputSchema + structuredContent)."""
    return _WEATHER.get(city, Weather(city=city, temperature_c=20.0, conditions="Unknown"))


@mcp.tool()
async def progress_steps(steps: int, ctx: Context) -> str:
    """Send `steps` progress notifications (progress 1..steps, total steps), then answer."""
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


@mcp.resource("fixture://greeting", name="greeting", mime_type="text/plain")
def greeting() -> str:
    """A static text resource."""
    return "Hello from the mcptape fixture server."


@mcp.resource("fixture://config", name="config", mime_type="application/json")
def config() -> dict[str, object]:
    """A static JSON resource."""
    return {"name": "mcptape-fixture", "features": ["tools", "resources", "prompts"], "version": 1}


@mcp.resource("fixture://items/{item_id}", name="item", mime_type="text/plain")
def item(item_id: str) -> str:
    """A templated resource."""
    return f"item {item_id}"


@mcp.prompt()
def review(code: str, language: str = "python") -> str:
    """Ask for a review of a piece of code."""
    return f"Please review this {language} code:\n\n{code}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    if args.http:
        print(f"py_server: streamable HTTP on 127.0.0.1:{args.port}", file=sys.stderr)
        mcp.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        mcp.run()


if __name__ == "__main__":
    main()
