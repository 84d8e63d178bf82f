#!/usr/bin/env python3
"""Scriptable MCP client for mcptape's integration tests (official Python SDK, mcp==2.3.0).

Usage:
    python py_client.py --scenario NAME [--mode legacy|2026-07-28|auto] -- <server command> [args...]

Spawns the server command over stdio (with this process's full environment, so variables such
as MEMORY_FILE_PATH reach the server, also through a recorder in between), runs the scenario and
prints ONE JSON document on stdout: the transcript of what the client observed.
Diagnostics go to stderr. Exit status: 0 on success, 1 when a step failed unexpectedly
(the transcript is still printed, with the failing step's "error"), 2 on usage errors.

Scenarios: everything (server-everything, legacy era only), memory (server-memory),
pyserver and parallel (py_server.py, both eras).

Determinism: the transcript holds no timestamps, request ids or progress tokens. Things that the
SDK or the server make random per run never reach it: the 2026-07-28 `requestState` of an
input_required round is consumed inside the SDK (only the sampling request and the final result
are recorded). Notifications outside any request (server-everything sends
notifications/tools/list_changed around the handshake, asks roots/list and logs "Roots updated"
at a varying moment) are recorded as one sorted list ("notifications"), not in arrival order.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp.types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.session import ClientRequestContext

MODES = ("legacy", "2026-07-28", "auto")
SCENARIOS = ("everything", "memory", "pyserver", "parallel", "listen", "secrets", "tagged")

# The secrets the `secrets` scenario sends as tool arguments (synthetic, in real formats).
SECRET_API_KEY = os.environ.get("SECRETS_API_KEY", "sk-proj-Fx3kQ9mZ2pLw7Rt5Yv1Nb8Hc4Jd6Gs0Ae")
SECRET_TOKEN = os.environ.get("SECRETS_TOKEN", "ghp_Q7wE3rT9yU1iO5pA2sD8fG4hJ6kL0zXcV1bN")
STEP_TIMEOUT_S = 60.0
TOTAL_TIMEOUT_S = 240.0

# Fixed answers the client gives to server -> client requests.
SAMPLING_ANSWER = types.CreateMessageResult(
    role="assistant",
    content=types.TextContent(type="text", text="A fixed answer from the mcptape test client."),
    model="mcptape-fixed-model",
    stop_reason="endTurn",
)
ROOTS_ANSWER = types.ListRootsResult(roots=[types.Root(uri="file:///tmp/mcptape-root", name="mcptape-root")])
ELICIT_ANSWER = types.ElicitResult(action="decline")


def log(msg: str) -> None:
    print(f"py_client: {msg}", file=sys.stderr, flush=True)


def dump(model: Any) -> Any:
    """A pydantic model as wire-shaped JSON (camelCase aliases, no None fields)."""
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


def describe(e: BaseException) -> str:
    """One line per leaf exception (anyio wraps transport failures in exception groups)."""
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(describe(x) for x in e.exceptions)
    if isinstance(e, MCPError):
        return f"MCP error {e.code}: {e.message}"
    return f"{type(e).__name__}: {e}"


@dataclass
class Recorder:
    steps: list[dict[str, Any]] = field(default_factory=list)
    # Sampling / elicitation requests from the server, appended as they arrive; each step takes
    # the ones that arrived while it ran (they are caused by a tool call).
    pending: list[dict[str, Any]] = field(default_factory=list)
    # Messages not tied to a step (list_changed, logging, roots/list): sorted at the end, as
    # JSON strings, so arrival order does not matter (counts do).
    loose: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    # --- callbacks handed to the SDK -------------------------------------------------------
    async def on_sampling(self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        self.pending.append({"server_request": "sampling/createMessage", "params": dump(params)})
        return SAMPLING_ANSWER

    async def on_roots(self, ctx: ClientRequestContext) -> Any:
        # Not per step: server-everything asks for roots right after the handshake, at a
        # moment that varies run to run.
        self.loose.append(json.dumps({"server_request": "roots/list"}, sort_keys=True))
        return ROOTS_ANSWER

    async def on_elicit(self, ctx: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
        self.pending.append({"server_request": "elicitation/create", "params": dump(params)})
        return ELICIT_ANSWER

    async def on_logging(self, params: types.LoggingMessageNotificationParams) -> None:
        # Not per step either: server-everything logs "Roots updated" at a varying moment.
        entry = {"method": "notifications/message", "params": dump(params)}
        self.loose.append(json.dumps(entry, sort_keys=True))

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            log(f"transport-level exception from the SDK: {message!r}")
            self.loose.append(json.dumps({"exception": type(message).__name__}, sort_keys=True))
            return
        root = getattr(message, "root", message)
        method = getattr(root, "method", type(root).__name__)
        if method in ("notifications/message", "notifications/progress"):
            return  # delivered to the logging / progress callbacks, recorded per step there
        params = getattr(root, "params", None)
        entry = {"method": method}
        if params is not None:
            entry["params"] = dump(params)
        self.loose.append(json.dumps(entry, sort_keys=True))

    # --- steps ----------------------------------------------------------------------------
    async def step(
        self,
        name: str,
        fn: Callable[[], Awaitable[Any]],
        *,
        shape: Callable[[Any], Any] = dump,
        progress: list[dict[str, Any]] | None = None,
        expect_error: bool = False,
    ) -> Any:
        """Run one step and record its result or error, plus what arrived while it ran."""
        start = len(self.pending)
        record: dict[str, Any] = {"step": name}
        value = None
        try:
            with_timeout = asyncio.wait_for(fn(), STEP_TIMEOUT_S)
            value = await with_timeout
            record["result"] = shape(value)
            if getattr(value, "is_error", False) and not expect_error:
                self.failures.append(f"step {name!r}: tool returned isError=true: {record['result']}")
        except MCPError as e:
            record["error"] = {"code": e.code, "message": e.message}
            if not expect_error:
                self.failures.append(f"step {name!r}: MCP error {e.code}: {e.message}")
        except Exception as e:  # noqa: BLE001 - the transcript must still be printed
            record["error"] = {"exception": type(e).__name__, "message": str(e)}
            self.failures.append(f"step {name!r}: {type(e).__name__}: {e}")
        if expect_error:
            record["expect_error"] = True
            if "error" not in record and not getattr(value, "is_error", False):
                self.failures.append(f"step {name!r}: expected an error, got a result")
        if progress is not None:
            record["progress"] = progress
        observed = self.pending[start:]
        if observed:
            record["observed"] = observed
        self.steps.append(record)
        return value


def progress_collector() -> tuple[list[dict[str, Any]], Callable[..., Awaitable[None]]]:
    seen: list[dict[str, Any]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        entry: dict[str, Any] = {"progress": progress}
        if total is not None:
            entry["total"] = total
        if message is not None:
            entry["message"] = message
        seen.append(entry)

    return seen, on_progress


def tool_names(result: types.ListToolsResult) -> list[str]:
    return sorted(t.name for t in result.tools)


def list_shape(key: str, attr: str = "name") -> Callable[[Any], Any]:
    def shape(result: Any) -> Any:
        out: dict[str, Any] = {key: [getattr(x, attr) for x in getattr(result, key)]}
        if getattr(result, "next_cursor", None):
            out["nextCursor"] = "<present>"  # opaque, possibly random per run
        return out

    return shape


# --- scenarios ------------------------------------------------------------------------------


async def scenario_everything(c: Client, r: Recorder) -> None:
    await r.step("list_tools", lambda: c.list_tools(), shape=tool_names)
    await r.step("call echo", lambda: c.call_tool("echo", {"message": "hello tape"}))
    await r.step("call get-sum", lambda: c.call_tool("get-sum", {"a": 2, "b": 40}))
    await r.step(
        "call trigger-sampling-request",
        lambda: c.call_tool("trigger-sampling-request", {"prompt": "Say hi to the tape", "maxTokens": 64}),
    )
    seen, on_progress = progress_collector()
    await r.step(
        "call trigger-long-running-operation",
        lambda: c.call_tool(
            "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress_callback=on_progress
        ),
        progress=seen,
    )
    await r.step("call get-structured-content", lambda: c.call_tool("get-structured-content", {"location": "Chicago"}))
    await r.step("list_resources", lambda: c.list_resources(), shape=list_shape("resources", "uri"))
    await r.step("read_resource", lambda: c.read_resource("demo://resource/static/document/features.md"))
    await r.step("list_prompts", lambda: c.list_prompts(), shape=list_shape("prompts"))
    await r.step("get_prompt args-prompt", lambda: c.get_prompt("args-prompt", {"city": "Lyon", "state": "Rhone"}))


async def scenario_memory(c: Client, r: Recorder) -> None:
    await r.step("list_tools", lambda: c.list_tools(), shape=tool_names)
    entities = [
        {"name": "Ada", "entityType": "person", "observations": ["writes programs"]},
        {"name": "Analytical Engine", "entityType": "machine", "observations": ["mechanical"]},
        {"name": "Tape", "entityType": "medium", "observations": []},
    ]
    await r.step("create_entities", lambda: c.call_tool("create_entities", {"entities": entities}))
    relations = [
        {"from": "Ada", "to": "Analytical Engine", "relationType": "programs"},
        {"from": "Analytical Engine", "to": "Tape", "relationType": "reads"},
    ]
    await r.step("create_relations", lambda: c.call_tool("create_relations", {"relations": relations}))
    observations = [
        {"entityName": "Ada", "contents": ["first programmer"]},
        {"entityName": "Tape", "contents": ["punched cards", "replayable"]},
    ]
    await r.step("add_observations", lambda: c.call_tool("add_observations", {"observations": observations}))
    await r.step("read_graph", lambda: c.call_tool("read_graph", {}))
    await r.step("search_nodes", lambda: c.call_tool("search_nodes", {"query": "Tape"}))
    await r.step("open_nodes", lambda: c.call_tool("open_nodes", {"names": ["Ada", "Tape"]}))


async def scenario_pyserver(c: Client, r: Recorder) -> None:
    await r.step("list_tools", lambda: c.list_tools(), shape=tool_names)
    await r.step("call add", lambda: c.call_tool("add", {"a": 2, "b": 3}))
    await r.step("call echo", lambda: c.call_tool("echo", {"text": "hello tape"}))
    await r.step("call slow_echo", lambda: c.call_tool("slow_echo", {"text": "later", "delay_ms": 50}))
    await r.step("call weather", lambda: c.call_tool("weather", {"city": "Oslo"}))
    seen, on_progress = progress_collector()
    await r.step(
        "call progress_steps",
        lambda: c.call_tool("progress_steps", {"steps": 3}, progress_callback=on_progress),
        progress=seen,
    )
    await r.step("call ask_llm", lambda: c.call_tool("ask_llm", {"topic": "tapes"}))
    for i in (1, 2, 3):
        await r.step(f"call counter #{i}", lambda: c.call_tool("counter", {}))
    await r.step("call missing tool", lambda: c.call_tool("no_such_tool", {}), expect_error=True)
    await r.step("list_resources", lambda: c.list_resources(), shape=list_shape("resources", "uri"))
    await r.step("read_resource greeting", lambda: c.read_resource("fixture://greeting"))
    await r.step("read_resource item template", lambda: c.read_resource("fixture://items/42"))
    await r.step("list_prompts", lambda: c.list_prompts(), shape=list_shape("prompts"))
    await r.step("get_prompt review", lambda: c.get_prompt("review", {"code": "print(1)", "language": "python"}))


async def scenario_parallel(c: Client, r: Recorder) -> None:
    # List first: the SDK lists tools by itself before a call to an unlisted tool (to validate
    # structured output), which would add 8 racing tools/list requests.
    await r.step("list_tools", lambda: c.list_tools(), shape=tool_names)
    n = 8
    # Later calls sleep less, so answers come back in (roughly) reverse order of the requests.
    args = [{"text": f"call-{i}", "delay_ms": (n - i) * 40} for i in range(n)]
    results = await asyncio.gather(
        *(c.call_tool("slow_echo", a) for a in args), return_exceptions=True
    )
    for i, (a, res) in enumerate(zip(args, results)):

        async def done(res: Any = res) -> Any:
            if isinstance(res, BaseException):
                raise res
            return res

        await r.step(f"parallel slow_echo #{i} {json.dumps(a, sort_keys=True)}", done)


async def scenario_listen(c: Client, r: Recorder) -> None:
    """2026-07-28 only: a `subscriptions/listen` stream sees the change a tool call announces."""
    await r.step("list_tools", lambda: c.list_tools(), shape=tool_names)
    async with c.listen(tools_list_changed=True) as sub:
        events = sub.__aiter__()
        await r.step("call touch_tools", lambda: c.call_tool("touch_tools", {}))

        async def first_event() -> Any:
            ev = await asyncio.wait_for(events.__anext__(), STEP_TIMEOUT_S)
            return {"event": type(ev).__name__}

        await r.step("listen: first event", first_event, shape=lambda x: x)


async def scenario_secrets(c: Client, r: Recorder) -> None:
    """py_server.py's `deploy` takes `api_key` and `token`: the whole tools/list (schemas
    included) and the call's result are the transcript."""
    await r.step("list_tools (full)", lambda: c.list_tools())
    args = {"service": "billing", "api_key": SECRET_API_KEY, "token": SECRET_TOKEN, "replicas": 2.5}
    await r.step("call deploy", lambda: c.call_tool("deploy", args))
    await r.step("call add", lambda: c.call_tool("add", {"a": 1, "b": 2}))


async def scenario_tagged(c: Client, r: Recorder) -> None:
    """server-everything, one of many sessions: calls only this session asks (`MCPTAPE_TAG`, a
    number), so an answer paired with another session's request shows; with
    `MCPTAPE_ELICIT=1` an elicitation is in flight in the middle."""
    tag = int(os.environ.get("MCPTAPE_TAG", "0"))
    await r.step("call echo", lambda: c.call_tool("echo", {"message": f"session {tag}"}))
    if os.environ.get("MCPTAPE_ELICIT") == "1":
        await r.step("call trigger-elicitation-request", lambda: c.call_tool("trigger-elicitation-request", {}))
    await r.step("call get-sum", lambda: c.call_tool("get-sum", {"a": tag, "b": 1000 * tag}))
    await r.step("call echo again", lambda: c.call_tool("echo", {"message": f"bye {tag}"}))


SCENARIO_FNS = {
    "tagged": scenario_tagged,
    "secrets": scenario_secrets,
    "listen": scenario_listen,
    "everything": scenario_everything,
    "memory": scenario_memory,
    "pyserver": scenario_pyserver,
    "parallel": scenario_parallel,
}


async def run(scenario: str, mode: str, command: list[str]) -> tuple[dict[str, Any], list[str]]:
    env = dict(os.environ)
    if scenario == "memory" and not env.get("MEMORY_FILE_PATH"):
        with tempfile.TemporaryDirectory(prefix="mcptape-memory-") as tmpdir:
            env["MEMORY_FILE_PATH"] = os.path.join(tmpdir, "memory.jsonl")
            log(f"MEMORY_FILE_PATH not set; using fresh {env['MEMORY_FILE_PATH']}")
            return await run_with_env(scenario, mode, command, env)
    return await run_with_env(scenario, mode, command, env)


async def run_with_env(
    scenario: str, mode: str, command: list[str], env: dict[str, str]
) -> tuple[dict[str, Any], list[str]]:
    # A single http(s) URL instead of a command: connect over Streamable HTTP.
    if len(command) == 1 and command[0].startswith(("http://", "https://")):
        params: Any = command[0]
        if command[0].rstrip("/").endswith("/sse"):
            # The older HTTP+SSE transport (2024-11-05): GET /sse, then POST to its endpoint.
            from mcp.client.sse import sse_client

            params = sse_client(command[0])
    else:
        params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    r = Recorder()
    client = Client(
        params,
        mode=mode,
        client_info=types.Implementation(name="mcptape-py-client", version="1.0.0"),
        sampling_callback=r.on_sampling,
        list_roots_callback=r.on_roots,
        elicitation_callback=r.on_elicit,
        logging_callback=r.on_logging,
        message_handler=r.on_message,
        read_timeout_seconds=STEP_TIMEOUT_S,
        # No client-side response cache: every call must go on the wire (a recorder must see it).
        cache=None,
    )
    transcript: dict[str, Any] = {"scenario": scenario, "mode": mode}
    try:
        async with client as c:
            transcript["protocolVersion"] = c.protocol_version
            info = c.server_info
            # name/version only: fixed per server build (mode 2026-07-28 learns none up front).
            transcript["serverInfo"] = {"name": info.name, "version": info.version} if info else None
            log(f"connected: protocol {c.protocol_version}, server {transcript['serverInfo']}")
            await SCENARIO_FNS[scenario](c, r)
    except Exception as e:  # noqa: BLE001
        msg = describe(e)
        transcript["fatal"] = msg
        r.failures.append(f"connection/scenario aborted: {msg}")
    transcript["steps"] = r.steps
    transcript["notifications"] = [json.loads(x) for x in sorted(r.loose)]
    return transcript, r.failures


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        print("usage: py_client.py --scenario NAME [--mode legacy|2026-07-28|auto] -- <server command> [args...] | <http URL>",
              file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="py_client.py", description="Scriptable MCP client (see module doc).")
    parser.add_argument("--scenario", required=True, choices=SCENARIOS)
    parser.add_argument("--mode", default="legacy", choices=MODES)
    opts = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    if not command:
        parser.error("missing server command after --")

    async def bounded() -> tuple[dict[str, Any], list[str]]:
        return await asyncio.wait_for(run(opts.scenario, opts.mode, command), TOTAL_TIMEOUT_S)

    try:
        transcript, failures = asyncio.run(bounded())
    except asyncio.TimeoutError:
        log(f"FAILED: scenario {opts.scenario} did not finish within {TOTAL_TIMEOUT_S}s")
        return 1
    json.dump(transcript, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    sys.stdout.flush()
    if failures:
        for f in failures:
            log(f"FAILED: {f}")
        return 1
    log(f"scenario {opts.scenario} ({opts.mode}): {len(transcript['steps'])} steps ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
