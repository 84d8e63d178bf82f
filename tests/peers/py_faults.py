#!/usr/bin/env python3
"""What the official Python SDK client (mcp==2.3.0) sees of play's time and fault policies.

Usage:
    python py_faults.py --steps JSON [--mode legacy|2026-07-28|auto] -- <server command> [args...] | <http URL>

STEPS is a JSON list; each step is one tool call, or a list of calls made at once:
    {"tool": "echo", "args": {"text": "hi"}, "timeout": 5}
    [{"tool": "slow_echo", "args": {...}}, {"tool": "add", "args": {...}}]

Prints ONE JSON document on stdout: {"steps": [...]} with, per call, "tool", "outcome"
("result", "error", "timeout" or "disconnected"), "code" and "message" of an error, "text" (the
result's first text), "ms" (how long the call took, measured here), and "sampled" (how many
sampling requests the server made while it ran). A call after the connection was lost is
"disconnected" at once. Diagnostics on stderr. Exit 0 unless the script itself failed (2 usage).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import mcp.types as types
from mcp import Client, MCPError, StdioServerParameters
from py_client import SAMPLING_ANSWER  # beside this file: the same fixed answer

TOTAL_TIMEOUT_S = 120.0


def log(msg: str) -> None:
    print(f"py_faults: {msg}", file=sys.stderr, flush=True)


def leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [x for sub in e.exceptions for x in leaves(sub)]
    return [e]


class Run:
    def __init__(self) -> None:
        self.sampled = 0
        self.lost = False
        # The calls under way: when the transport fails it may end the whole client (the
        # SDK's HTTP transport raises out of the session), and these are what it cut.
        self.inflight: list[dict[str, Any]] = []

    async def on_sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        self.sampled += 1
        return SAMPLING_ANSWER

    async def call(self, c: Client, step: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": step["tool"]}
        if self.lost:
            out["outcome"] = "disconnected"
            return out
        before = self.sampled
        start = time.monotonic()
        out["start"] = start
        self.inflight.append(out)
        timeout = float(step.get("timeout", 30))
        try:
            result = await asyncio.wait_for(c.call_tool(step["tool"], step.get("args", {})), timeout)
            out["outcome"] = "result"
            texts = [x.text for x in result.content if getattr(x, "type", None) == "text"]
            if texts:
                out["text"] = texts[0]
            if result.is_error:
                out["is_error"] = True
        except asyncio.TimeoutError:
            out["outcome"] = "timeout"
        except MCPError as e:
            # The SDK turns a transport that went away into an MCPError of its own ("Connection
            # closed"); an answer from the server is any other.
            if "closed" in e.message.lower() or "disconnect" in e.message.lower():
                out["outcome"] = "disconnected"
                self.lost = True
            else:
                out["outcome"] = "error"
            out["code"] = e.code
            out["message"] = e.message
        except Exception as e:  # noqa: BLE001 - a lost transport, whatever the SDK calls it
            out["outcome"] = "disconnected"
            out["message"] = "; ".join(f"{type(x).__name__}: {x}" for x in leaves(e))
            self.lost = True
        out["ms"] = round((time.monotonic() - out.pop("start")) * 1000)
        out["sampled"] = self.sampled - before
        self.inflight.remove(out)
        return out


async def run(steps: list[Any], mode: str, target: list[str]) -> dict[str, Any]:
    if len(target) == 1 and target[0].startswith("http://"):
        params: Any = target[0]
        if target[0].rstrip("/").endswith("/sse"):
            # The older HTTP+SSE transport (2024-11-05): GET /sse, then POST to its endpoint.
            from mcp.client.sse import sse_client

            params = sse_client(target[0])
    else:
        params = StdioServerParameters(command=target[0], args=target[1:])
    r = Run()
    client = Client(
        params,
        mode=mode,
        client_info=types.Implementation(name="mcptape-py-faults", version="1.0.0"),
        sampling_callback=r.on_sampling,
        read_timeout_seconds=TOTAL_TIMEOUT_S,
        cache=None,
    )
    doc: dict[str, Any] = {"steps": []}
    try:
        async with client as c:
            await c.list_tools()  # the SDK lists by itself before an unlisted tool's call otherwise
            for step in steps:
                if isinstance(step, list):
                    doc["steps"].append(list(await asyncio.gather(*(r.call(c, s) for s in step))))
                else:
                    doc["steps"].append(await r.call(c, step))
    except Exception as e:  # noqa: BLE001 - a lost transport may end the whole client
        why = "; ".join(f"{type(x).__name__}: {x}" for x in leaves(e))
        cut = []
        for out in r.inflight:
            out.update(outcome="disconnected", message=why)
            out["ms"] = round((time.monotonic() - out.pop("start")) * 1000)
            cut.append(out)
        if cut:
            doc["steps"].append(cut[0] if len(cut) == 1 else cut)
        doc["closing"] = why
    return doc


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="py_faults.py")
    parser.add_argument("--steps", required=True)
    parser.add_argument("--mode", default="legacy", choices=("legacy", "2026-07-28", "auto"))
    opts = parser.parse_args(argv[:split])
    target = argv[split + 1 :]
    if not target:
        parser.error("missing server command or URL after --")
    doc = asyncio.run(asyncio.wait_for(run(json.loads(opts.steps), opts.mode, target), TOTAL_TIMEOUT_S))
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
