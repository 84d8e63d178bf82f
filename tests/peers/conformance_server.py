#!/usr/bin/env python3
"""An MCP server that implements every server scenario of the MCP conformance suite.

Built on the official Python SDK (mcp==2.3.0): `MCPServer` for the tools, resources and prompts,
the SDK's own streamable-HTTP session manager for the wire, with a few small subclasses where a
scenario needs something the high-level API does not offer (see "Transport" below).

One endpoint, two protocol eras, picked per request by the SDK:
  - legacy (2025-06-18 / 2025-11-25): a client that POSTs `initialize` gets a stateful session
    (`Mcp-Session-Id`), SSE responses, server-to-client requests (sampling, elicitation), logging,
    `resources/subscribe`, resumable streams (priming event + `retry:` + `Last-Event-ID` replay);
  - 2026-07-28: a request whose `MCP-Protocol-Version` header names that revision is served
    statelessly (`server/discover`, per-request `_meta`, `input_required` results with
    `requestState`/`inputResponses`, `subscriptions/listen`, Mcp-Method/Mcp-Name/Mcp-Param-*
    header validation, caching hints).

Usage:
    python conformance_server.py --port P     # http://127.0.0.1:P/mcp (loopback only)
    python conformance_server.py --port 0     # a free port; stdout's first line names the URL

stdout carries exactly one line, `listening http://127.0.0.1:PORT/mcp`, once the socket is bound;
diagnostics go to stderr.

Determinism (so a recording replays byte-for-byte): results carry no random ids and no clock
values. Session ids are `conformance-session-N` (N counts sessions per process), SSE event ids
count per session (`1`, `2`, ...), `requestState` is an HMAC-signed (not encrypted) token under a
fixed fixture key, and SSE keepalive comments are a constant `: ping`. What still varies is timing
(when a keepalive comment or a stream close happens), not content.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import hmac
import io
import itertools
import json
import logging
import socket
import struct
import sys
import warnings
import wave
import zlib
from collections.abc import Mapping
from typing import Annotated, Any

import anyio
from mcp_types import (
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    AudioContent,
    CallToolResult,
    Completion,
    CreateMessageRequest,
    CreateMessageRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    InputRequiredResult,
    ListRootsRequest,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import Field
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

import mcp.server.streamable_http as sdk_streamable_http
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.request_state import RequestStateBoundary
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError

log = logging.getLogger("conformance_server")

# The SDK marks logging and sampling deprecated as of 2026-07-28; the legacy scenarios use them.
warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", message=".*deprecated as of 2026-07-28.*")


# --- fixed payloads ------------------------------------------------------------------------------


def _png_1x1_red() -> str:
    """A 1x1 red PNG, built byte by byte (always the same bytes)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    idat = zlib.compress(b"\x00\xff\x00\x00", 9)  # filter byte 0, then one red pixel
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


def _wav_silence() -> str:
    """A tiny WAV: 8 samples of 8-bit mono silence at 8 kHz."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(8000)
        w.writeframes(b"\x80" * 8)
    return base64.b64encode(buf.getvalue()).decode()


PNG_B64 = _png_1x1_red()
WAV_B64 = _wav_silence()
RETRY_MS = 500  # the `retry:` hint on every priming event


# --- the server ----------------------------------------------------------------------------------

_ALL_CACHEABLE = ("tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read")

mcp: MCPServer = MCPServer(
    name="mcptape-conformance",
    version="1.0.0",
    instructions="Conformance fixture: one tool, resource or prompt per conformance-suite scenario.",
    log_level="WARNING",
    # caching (2026-07-28, SEP-2549): every cacheable result carries ttlMs + cacheScope.
    cache_hints={m: CacheHint(ttl_ms=60_000, scope="public") for m in _ALL_CACHEABLE},  # type: ignore[misc]
)


def _is_modern(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)])


def _elicit(message: str, properties: dict[str, Any], required: list[str]) -> ElicitRequest:
    return ElicitRequest(
        params=ElicitRequestFormParams(
            message=message,
            requested_schema={"type": "object", "properties": properties, "required": required},
        )
    )


def _sample(text: str, max_tokens: int) -> CreateMessageRequest:
    return CreateMessageRequest(
        params=CreateMessageRequestParams(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text=text))],
            max_tokens=max_tokens,
        )
    )


def _accepted(ctx: Context, key: str) -> dict[str, Any] | None:
    """The `content` of an accepted elicitation answer under `key`, or None."""
    answer = (ctx.input_responses or {}).get(key)
    if isinstance(answer, ElicitResult) and answer.action == "accept":
        return dict(answer.content or {})
    return None


def _has(ctx: Context, key: str) -> bool:
    return key in (ctx.input_responses or {})


def _sampled_text(ctx: Context, key: str) -> str:
    answer = (ctx.input_responses or {}).get(key)
    content = getattr(answer, "content", None)
    return content.text if isinstance(content, TextContent) else ""


# ----- tools: content types ----------------------------------------------------------------------


# tools-call-simple-text (also the first tool listed: http-header-validation calls it with {}).
@mcp.tool(description="Returns simple text content.")
async def test_simple_text() -> CallToolResult:
    return _text("This is a simple text response for testing.")


# tools-call-image
@mcp.tool(description="Returns a 1x1 red PNG as image content.")
async def test_image_content() -> CallToolResult:
    return CallToolResult(content=[ImageContent(type="image", data=PNG_B64, mime_type="image/png")])


# tools-call-audio
@mcp.tool(description="Returns a tiny WAV as audio content.")
async def test_audio_content() -> CallToolResult:
    return CallToolResult(content=[AudioContent(type="audio", data=WAV_B64, mime_type="audio/wav")])


# tools-call-embedded-resource
@mcp.tool(description="Returns an embedded text resource.")
async def test_embedded_resource() -> CallToolResult:
    resource = TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return CallToolResult(content=[EmbeddedResource(type="resource", resource=resource)])


# tools-call-mixed-content
@mcp.tool(description="Returns text, image and resource content together.")
async def test_multiple_content_types() -> CallToolResult:
    resource = TextResourceContents(
        uri="test://mixed-content-resource", mime_type="application/json", text='{"test":"data","value":123}'
    )
    return CallToolResult(
        content=[
            TextContent(type="text", text="Multiple content types test:"),
            ImageContent(type="image", data=PNG_B64, mime_type="image/png"),
            EmbeddedResource(type="resource", resource=resource),
        ]
    )


# tools-call-error
@mcp.tool(description="Always fails as a tool error (isError: true).")
async def test_error_handling() -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text="This tool intentionally returns an error for testing")],
        is_error=True,
    )


# json-schema-2020-12: its inputSchema is replaced below by the suite's exact 2020-12 schema
# ($schema, $defs with $anchor, $ref, allOf/anyOf, if/then/else, additionalProperties: false).
@mcp.tool(description="Tool with JSON Schema 2020-12 features")
async def json_schema_2020_12_tool(
    name: str | None = None,
    address: dict[str, Any] | None = None,
    contactMethod: str | None = None,
    phone: str | None = None,
    email: str | None = None,
) -> CallToolResult:
    given = {"name": name, "address": address, "contactMethod": contactMethod, "phone": phone, "email": email}
    return _text(json.dumps({k: v for k, v in given.items() if v is not None}, sort_keys=True))


mcp._tool_manager.get_tool("json_schema_2020_12_tool").parameters = {  # type: ignore[union-attr]
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


# http-custom-header-server-validation: `region` is mirrored into the `Mcp-Param-Region` header.
@mcp.tool(description="Echoes a string parameter that travels in the Mcp-Param-Region header (SEP-2243).")
async def test_custom_header(
    region: Annotated[str, Field(description="A region name", json_schema_extra={"x-mcp-header": "Region"})],
) -> CallToolResult:
    return _text(f"region: {region}")


# ----- tools: notifications during a call --------------------------------------------------------

# logging/setLevel per legacy session (keyed by Mcp-Session-Id); the legacy default is "debug".
_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
_session_levels: dict[str, str] = {}


def _session_key(ctx: Context | ServerRequestContext[Any, Any]) -> str:
    request = ctx.request_context.request if isinstance(ctx, Context) else ctx.request
    headers = getattr(request, "headers", None)
    return (headers.get("mcp-session-id") if headers is not None else None) or ""


async def _log(ctx: Context, level: str, text: str) -> None:
    threshold = _session_levels.get(_session_key(ctx), "debug")
    if _is_modern(ctx) or _LEVELS.index(level) >= _LEVELS.index(threshold):
        # On 2026-07-28 the SDK itself drops this unless the request's _meta opted in to that level.
        await ctx.log(level, text)  # type: ignore[arg-type]


# tools-call-with-logging: three info logs, ~50 ms apart.
@mcp.tool(description="Sends three info log notifications while it runs.")
async def test_tool_with_logging(ctx: Context) -> CallToolResult:
    await _log(ctx, "info", "Tool execution started")
    await anyio.sleep(0.05)
    await _log(ctx, "info", "Tool processing data")
    await anyio.sleep(0.05)
    await _log(ctx, "info", "Tool execution completed")
    return _text("Tool with logging executed successfully")


# server-stateless (sep-2575-server-no-log-without-loglevel): logs only if _meta asked for them.
@mcp.tool(description="Logs one info message (2026-07-28: only delivered if the request's _meta set a log level).")
async def test_logging_tool(ctx: Context) -> CallToolResult:
    await _log(ctx, "info", "test_logging_tool ran")
    return _text("logged")


# tools-call-with-progress: progress 0, 50, 100 of 100, ~50 ms apart.
@mcp.tool(description="Reports progress 0/100, 50/100, 100/100.")
async def test_tool_with_progress(ctx: Context) -> CallToolResult:
    for step, progress in enumerate((0, 50, 100)):
        if step:
            await anyio.sleep(0.05)
        await ctx.report_progress(progress, 100)
    return _text("Tool with progress executed successfully")


# server-sse-polling: closes its own SSE stream mid-call; the result is replayed on the client's
# GET with Last-Event-ID (legacy era, sessions of 2025-11-25 and later).
@mcp.tool(description="Closes the SSE stream mid-call so the client must resume with Last-Event-ID.")
async def test_reconnection(ctx: Context) -> CallToolResult:
    await anyio.sleep(0.05)
    await ctx.close_sse_stream()
    await anyio.sleep(0.2)
    return _text("Reconnection test completed")


# ----- tools: server-to-client requests (legacy) / input_required (2026-07-28) -------------------


# tools-call-sampling
@mcp.tool(description="Asks the client's LLM (sampling/createMessage) and returns its answer.")
async def test_sampling(prompt: str, ctx: Context) -> CallToolResult | InputRequiredResult:
    if _is_modern(ctx):
        if not _has(ctx, "sampling"):
            return InputRequiredResult(input_requests={"sampling": _sample(prompt, 100)})
        return _text(f"LLM response: {_sampled_text(ctx, 'sampling')}")
    answer = await ctx.session.create_message(  # type: ignore[call-overload]
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=100,
        related_request_id=ctx.request_id,
    )
    text = answer.content.text if isinstance(answer.content, TextContent) else ""
    return _text(f"LLM response: {text}")


_USER_SCHEMA = (
    {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    ["username", "email"],
)


async def _elicit_legacy_or_modern(ctx: Context, key: str, request: ElicitRequest) -> CallToolResult | InputRequiredResult:
    """Legacy: an elicitation/create request mid-call. 2026-07-28: an input_required round trip."""
    if _is_modern(ctx):
        answer = (ctx.input_responses or {}).get(key)
        if not isinstance(answer, ElicitResult):
            return InputRequiredResult(input_requests={key: request})
    else:
        assert isinstance(request.params, ElicitRequestFormParams)
        answer = await ctx.session.elicit_form(
            request.params.message, request.params.requested_schema, related_request_id=ctx.request_id
        )
    content = json.dumps(answer.content or {}, sort_keys=True)
    return _text(f"Elicitation completed: action={answer.action}, content={content}")


# tools-call-elicitation
@mcp.tool(description="Asks the user for a username and email (elicitation/create).")
async def test_elicitation(message: str, ctx: Context) -> CallToolResult | InputRequiredResult:
    return await _elicit_legacy_or_modern(ctx, "user_info", _elicit(message, *_USER_SCHEMA))


# elicitation-sep1034-defaults
@mcp.tool(description="Elicitation whose schema has a default for every primitive type (SEP-1034).")
async def test_elicitation_sep1034_defaults(ctx: Context) -> CallToolResult | InputRequiredResult:
    properties = {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    }
    request = _elicit("Please review and update the form fields with defaults", properties, [])
    return await _elicit_legacy_or_modern(ctx, "defaults", request)


# elicitation-sep1330-enums
@mcp.tool(description="Elicitation with all five enum schema variants (SEP-1330).")
async def test_elicitation_sep1330_enums(ctx: Context) -> CallToolResult | InputRequiredResult:
    properties = {
        "untitledSingle": {"type": "string", "description": "Untitled single-select", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "description": "Titled single-select",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "description": "Legacy titled enum",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "description": "Untitled multi-select",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "description": "Titled multi-select",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    }
    return await _elicit_legacy_or_modern(ctx, "enums", _elicit("Please select options from the enum fields", properties, []))


# server-stateless (sep-2575-http-server-no-independent-requests-on-stream): 2026-07-28 asks for
# input with an input_required result, never with a request on the response stream.
@mcp.tool(description="Asks for a confirmation: input_required on 2026-07-28, elicitation/create before.")
async def test_streaming_elicitation(ctx: Context) -> CallToolResult | InputRequiredResult:
    request = _elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
    return await _elicit_legacy_or_modern(ctx, "confirm", request)


# server-stateless (sep-2575-server-rejects-undeclared-capability): needs the client's sampling.
@mcp.tool(description="Needs the client's sampling capability; fails with -32021 when it was not declared.")
async def test_missing_capability(ctx: Context) -> CallToolResult | InputRequiredResult:
    capabilities = ctx.client_capabilities
    if capabilities is None or capabilities.sampling is None:
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="This tool requires the client's sampling capability",
            data={"requiredCapabilities": {"sampling": {}}},
        )
    if _is_modern(ctx) and not _has(ctx, "sampling"):
        return InputRequiredResult(input_requests={"sampling": _sample("Say hello", 20)})
    return _text("sampling capability present")


# server-stateless (list-changed on subscriptions/listen, 2026-07-28): announce a tools list change.
@mcp.tool(description="Announces a tools list change to subscriptions/listen streams (2026-07-28).")
async def test_trigger_tool_change(ctx: Context) -> CallToolResult:
    await ctx.notify_tools_changed()
    return _text("tools list change announced")


# server-stateless (list-changed on subscriptions/listen, 2026-07-28): announce a prompts list change.
@mcp.tool(description="Announces a prompts list change to subscriptions/listen streams (2026-07-28).")
async def test_trigger_prompt_change(ctx: Context) -> CallToolResult:
    await ctx.notify_prompts_changed()
    return _text("prompts list change announced")


# ----- tools: input_required multi-round trips (2026-07-28, SEP-2322) -----------------------------

_NAME_REQUEST = _elicit("What is your name?", {"name": {"type": "string"}}, ["name"])


# input-required-result-basic-elicitation, -missing-input-response, -result-type,
# -ignore-extra-params, -validate-input
@mcp.tool(description="input_required: asks for the user's name (user_name), then greets.")
async def test_input_required_result_elicitation(ctx: Context) -> CallToolResult | InputRequiredResult:
    answer = _accepted(ctx, "user_name")
    if answer is None or not isinstance(answer.get("name"), str):
        return InputRequiredResult(input_requests={"user_name": _NAME_REQUEST})
    return _text(f"Hello, {answer['name']}!")


# input-required-result-basic-sampling
@mcp.tool(description="input_required: asks the client's LLM for the capital of France.")
async def test_input_required_result_sampling(ctx: Context) -> CallToolResult | InputRequiredResult:
    if not _has(ctx, "capital_question"):
        return InputRequiredResult(
            input_requests={"capital_question": _sample("What is the capital of France?", 100)}
        )
    return _text(f"The LLM said: {_sampled_text(ctx, 'capital_question')}")


# input-required-result-basic-list-roots
@mcp.tool(description="input_required: asks for the client's roots, then lists them.")
async def test_input_required_result_list_roots(ctx: Context) -> CallToolResult | InputRequiredResult:
    answer = (ctx.input_responses or {}).get("client_roots")
    roots = getattr(answer, "roots", None)
    if roots is None:
        return InputRequiredResult(input_requests={"client_roots": ListRootsRequest()})
    return _text("Client roots: " + ", ".join(f"{r.name or ''} <{r.uri}>" for r in roots))


# input-required-result-request-state
@mcp.tool(description="input_required with requestState; the final answer says state-ok.")
async def test_input_required_result_request_state(ctx: Context) -> CallToolResult | InputRequiredResult:
    confirm = _elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
    if ctx.request_state != "awaiting-confirm" or not _has(ctx, "confirm"):
        return InputRequiredResult(input_requests={"confirm": confirm}, request_state="awaiting-confirm")
    return _text(f"state-ok: confirmed={json.dumps(_accepted(ctx, 'confirm'), sort_keys=True)}")


# input-required-result-multiple-input-requests
@mcp.tool(description="input_required: elicitation + sampling + roots/list in one round.")
async def test_input_required_result_multiple_inputs(ctx: Context) -> CallToolResult | InputRequiredResult:
    keys = ("user_name", "greeting", "client_roots")
    if ctx.request_state != "awaiting-all" or not all(_has(ctx, k) for k in keys):
        return InputRequiredResult(
            input_requests={
                "user_name": _NAME_REQUEST,
                "greeting": _sample("Generate a greeting", 50),
                "client_roots": ListRootsRequest(),
            },
            request_state="awaiting-all",
        )
    name = (_accepted(ctx, "user_name") or {}).get("name", "")
    return _text(f"{_sampled_text(ctx, 'greeting')} {name}".strip())


# input-required-result-multi-round: step1 -> step2 -> complete, requestState changes each round.
@mcp.tool(description="input_required over two rounds (name, then favourite color).")
async def test_input_required_result_multi_round(ctx: Context) -> CallToolResult | InputRequiredResult:
    state = ctx.request_state or ""
    if state.startswith("round-2:") and _accepted(ctx, "step2") is not None:
        color = _accepted(ctx, "step2").get("color", "")  # type: ignore[union-attr]
        return _text(f"Hello {state.removeprefix('round-2:')}, your favorite color is {color}.")
    step1 = _accepted(ctx, "step1")
    if state == "round-1" and step1 is not None:
        step2 = _elicit("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])
        return InputRequiredResult(input_requests={"step2": step2}, request_state=f"round-2:{step1.get('name', '')}")
    step1_request = _elicit("Step 1: What is your name?", {"name": {"type": "string"}}, ["name"])
    return InputRequiredResult(input_requests={"step1": step1_request}, request_state="round-1")


# input-required-result-tampered-state: the signed requestState is checked by _SignedRequestState.
@mcp.tool(description="input_required with an integrity-protected requestState.")
async def test_input_required_result_tampered_state(ctx: Context) -> CallToolResult | InputRequiredResult:
    if ctx.request_state != "tamper-check" or not _has(ctx, "confirm"):
        confirm = _elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
        return InputRequiredResult(input_requests={"confirm": confirm}, request_state="tamper-check")
    return _text("state-ok")


# input-required-result-capability-check: only asks for what the client declared.
@mcp.tool(description="input_required asking only for inputs the client has the capabilities for.")
async def test_input_required_result_capabilities(ctx: Context) -> CallToolResult | InputRequiredResult:
    capabilities = ctx.client_capabilities
    wanted: dict[str, Any] = {}
    if capabilities is not None and capabilities.sampling is not None and not _has(ctx, "summary"):
        wanted["summary"] = _sample("Summarize the capabilities you declared.", 50)
    if capabilities is not None and capabilities.elicitation is not None and not _has(ctx, "user_name"):
        wanted["user_name"] = _NAME_REQUEST
    if wanted:
        return InputRequiredResult(input_requests=wanted)
    return _text("all declared inputs received")


# ----- resources ---------------------------------------------------------------------------------


# resources-read-text (and resources-list, caching)
@mcp.resource("test://static-text", name="static-text", description="A static text resource", mime_type="text/plain")
def static_text() -> str:
    return "This is the content of the static text resource."


# resources-read-binary
@mcp.resource("test://static-binary", name="static-binary", description="A static PNG", mime_type="image/png")
def static_binary() -> bytes:
    return base64.b64decode(PNG_B64)


# resources-subscribe / resources-unsubscribe (subscribing needs no readable resource, but list one)
@mcp.resource("test://watched-resource", name="watched-resource", description="Subscribable", mime_type="text/plain")
def watched_resource() -> str:
    return "Watched resource content."


# resources-templates-read
@mcp.resource(
    "test://template/{id}/data", name="template-data", description="Data by id", mime_type="application/json"
)
def template_data(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"}, separators=(",", ":"))


# resources-subscribe / resources-unsubscribe (legacy era only; 2026-07-28 uses subscriptions/listen)
_subscriptions: dict[str, set[str]] = {}


async def _subscribe(ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
    _subscriptions.setdefault(_session_key(ctx), set()).add(str(params.uri))
    return EmptyResult()


async def _unsubscribe(ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams) -> EmptyResult:
    _subscriptions.get(_session_key(ctx), set()).discard(str(params.uri))
    return EmptyResult()


mcp._lowlevel_server.add_request_handler("resources/subscribe", SubscribeRequestParams, _subscribe)
mcp._lowlevel_server.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, _unsubscribe)


# logging-set-level (legacy era only; 2026-07-28 asks for logs per request in _meta)
async def _set_level(ctx: ServerRequestContext[Any, Any], params: SetLevelRequestParams) -> EmptyResult:
    _session_levels[_session_key(ctx)] = params.level
    return EmptyResult()


mcp._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, _set_level)


# ----- prompts -----------------------------------------------------------------------------------


# prompts-get-simple
@mcp.prompt(description="A simple prompt without arguments")
async def test_simple_prompt() -> list[UserMessage]:
    return [UserMessage("This is a simple prompt for testing.")]


# prompts-get-with-args (and completion-complete, which completes arg1)
@mcp.prompt(description="A prompt with two required arguments")
async def test_prompt_with_arguments(
    arg1: Annotated[str, Field(description="First test argument")],
    arg2: Annotated[str, Field(description="Second test argument")],
) -> list[UserMessage]:
    return [UserMessage(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]


# prompts-get-embedded-resource
@mcp.prompt(description="A prompt that embeds a resource")
async def test_prompt_with_embedded_resource(
    resourceUri: Annotated[str, Field(description="URI of the resource to embed")],
) -> list[UserMessage]:
    resource = TextResourceContents(uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing.")
    return [
        UserMessage(EmbeddedResource(type="resource", resource=resource)),
        UserMessage("Please process the embedded resource above."),
    ]


# prompts-get-with-image
@mcp.prompt(description="A prompt with image content")
async def test_prompt_with_image() -> list[UserMessage]:
    return [
        UserMessage(ImageContent(type="image", data=PNG_B64, mime_type="image/png")),
        UserMessage("Please analyze the image above."),
    ]


# input-required-result-non-tool-request: input_required on prompts/get.
@mcp.prompt(description="A prompt that first asks the user for context (input_required)")
async def test_input_required_result_prompt(ctx: Context) -> list[UserMessage] | InputRequiredResult:
    answer = _accepted(ctx, "user_context")
    if answer is None:
        request = _elicit("What context should the prompt use?", {"context": {"type": "string"}}, ["context"])
        return InputRequiredResult(input_requests={"user_context": request})
    return [UserMessage(f"Use this context: {answer.get('context', '')}")]


# ----- completion --------------------------------------------------------------------------------

_COMPLETIONS = ["paris", "park", "party", "test", "test-value"]


# completion-complete
@mcp.completion()
async def complete(ref: Any, argument: Any, context: Any) -> Completion:
    values = [v for v in _COMPLETIONS if v.startswith(argument.value)]
    return Completion(values=values, total=len(values), has_more=False)


# ----- requestState integrity (deterministic) ----------------------------------------------------

_STATE_KEY = b"mcptape conformance fixture requestState key (not a secret)"


class _SignedRequestState:
    """Signs `requestState` on the way out and verifies it on the way back in (SEP-2322).

    Replaces the SDK's `RequestStateBoundary`, whose tokens are AES-GCM under a per-process random
    key with a random nonce and a timestamp (so never the same twice). Here a token is
    `base64url(state).base64url(hmac)`, the HMAC over (method, target, arguments, state) under a
    fixed fixture key: the same round always gets the same token, and a token edited by the client
    (or moved to another request) is refused with -32602. No expiry.
    """

    _METHODS = ("tools/call", "prompts/get", "resources/read")

    @staticmethod
    def _b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    def _mac(self, method: str, params: Mapping[str, Any], state: str) -> str:
        target = params.get("uri") if method == "resources/read" else params.get("name")
        binding = json.dumps([method, str(target), params.get("arguments") or {}, state], sort_keys=True)
        return self._b64(hmac.new(_STATE_KEY, binding.encode(), hashlib.sha256).digest()[:16])

    def _unseal(self, method: str, params: Mapping[str, Any], token: Any) -> str:
        try:
            encoded, mac = token.split(".")
            state = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            if self._b64(state.encode()) == encoded and hmac.compare_digest(mac, self._mac(method, params, state)):
                return state
        except (AttributeError, ValueError, UnicodeDecodeError):
            pass
        raise MCPError(code=INVALID_PARAMS, message="Invalid or expired requestState", data={"reason": "invalid_request_state"})

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method not in self._METHODS:
            return await call_next(ctx)
        params: Mapping[str, Any] = ctx.params or {}
        if params.get("requestState") is not None:
            state = self._unseal(ctx.method, params, params["requestState"])
            ctx = dataclasses.replace(ctx, params={**params, "requestState": state})
        result = await call_next(ctx)
        if isinstance(result, InputRequiredResult) and result.request_state is not None:
            token = f"{self._b64(result.request_state.encode())}.{self._mac(ctx.method, params, result.request_state)}"
            return result.model_copy(update={"request_state": token})
        if isinstance(result, Mapping) and result.get("resultType") == "input_required":
            state = result.get("requestState")
            if isinstance(state, str):
                token = f"{self._b64(state.encode())}.{self._mac(ctx.method, params, state)}"
                return {**result, "requestState": token}
        return result


_chain = mcp._lowlevel_server.middleware
_chain[:] = [_SignedRequestState() if isinstance(m, RequestStateBoundary) else m for m in _chain]


# --- transport -----------------------------------------------------------------------------------


class _SessionEventStore(EventStore):
    """One per legacy session: every SSE event it sent, ids counting 1, 2, 3, ... (resumability)."""

    def __init__(self) -> None:
        self._next = itertools.count(1)
        self._events: list[tuple[EventId, StreamId, Any]] = []

    async def store_event(self, stream_id: StreamId, message: Any) -> EventId:
        event_id = str(next(self._next))
        self._events.append((event_id, stream_id, message))
        if len(self._events) > 10_000:
            del self._events[:1_000]
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        index = next((i for i, (eid, _, _) in enumerate(self._events) if eid == last_event_id), None)
        if index is None:
            return None
        stream_id = self._events[index][1]
        for event_id, sid, message in self._events[index + 1 :]:
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


class _Transport(sdk_streamable_http.StreamableHTTPServerTransport):
    """The SDK's legacy transport, with resumability keyed on the session's negotiated version.

    The SDK decides per request, from its `MCP-Protocol-Version` header, whether to send a priming
    event and offer `close_sse_stream()`. The suite's server-sse-polling scenario negotiates
    2025-11-25 but then sends `2025-03-26` in that header, so the version `initialize` settled on
    (the one the session actually speaks) decides here instead.
    """

    _negotiated: str | None = None

    def _session_version(self, header_version: str) -> str:
        return self._negotiated or header_version

    async def _handle_post_request(self, scope: Scope, request: Request, receive: Receive, send: Send) -> None:
        try:
            body = json.loads(await request.body())  # cached on the request; the SDK re-reads it
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("method") == "initialize" and "id" in body:
            requested = (body.get("params") or {}).get("protocolVersion")
            self._negotiated = requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        await super()._handle_post_request(scope, request, receive, send)

    async def _mint_priming_event(self, stream_id: StreamId, protocol_version: str) -> dict[str, Any] | None:
        return await super()._mint_priming_event(stream_id, self._session_version(protocol_version))

    def _create_session_message(self, message: Any, request: Request, request_id: Any, protocol_version: str) -> Any:
        return super()._create_session_message(message, request, request_id, self._session_version(protocol_version))


class _SessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager with deterministic session ids and a per-session event store."""

    _session_numbers = itertools.count(1)

    def _admit_session(self, requestor: Any) -> sdk_streamable_http.StreamableHTTPServerTransport | None:
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return None
        transport = _Transport(
            mcp_session_id=f"conformance-session-{next(self._session_numbers)}",
            is_json_response_enabled=self.json_response,
            event_store=_SessionEventStore(),
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )
        assert transport.mcp_session_id is not None
        if requestor is not None:
            self._session_owners[transport.mcp_session_id] = requestor
        self._server_instances[transport.mcp_session_id] = transport
        return transport


class _ConstantPingEventSourceResponse(EventSourceResponse):
    """sse-starlette's keepalive comment carries a timestamp; this one is always `: ping`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("ping_message_factory", lambda: ServerSentEvent(comment="ping"))
        super().__init__(*args, **kwargs)


sdk_streamable_http.EventSourceResponse = _ConstantPingEventSourceResponse  # type: ignore[misc]


def _security() -> TransportSecuritySettings:
    """DNS-rebinding protection: only loopback Host/Origin values are served."""
    hosts = ["127.0.0.1", "localhost", "[::1]"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*hosts, *(f"{h}:*" for h in hosts)],
        allowed_origins=[*(f"http://{h}" for h in hosts), *(f"http://{h}:*" for h in hosts)],
    )


def build_app() -> Starlette:
    manager = _SessionManager(
        app=mcp._lowlevel_server,
        event_store=None,  # each session gets its own (_SessionManager._admit_session)
        retry_interval=RETRY_MS,
        json_response=False,
        stateless=False,
        security_settings=_security(),
    )
    mcp._lowlevel_server._session_manager = manager
    return Starlette(routes=[Route("/mcp", endpoint=_Guarded(manager))], lifespan=lambda app: manager.run())


class _Guarded:
    """The /mcp ASGI endpoint: the SDK's, behind a Host/Origin check.

    dns-rebinding-protection: a foreign Host (421) or Origin (403) is refused before any session is
    created, so a refused request never consumes a session number.
    """

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self._endpoint = StreamableHTTPASGIApp(manager)
        self._guard = TransportSecurityMiddleware(_security())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = await self._guard.validate_request(Request(scope, receive), is_post=False)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self._endpoint(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1 (0: pick a free one)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="conformance_server: %(levelname)s %(name)s: %(message)s")

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)  # connections queue from here on, so the URL below is usable as soon as it is read
    port = sock.getsockname()[1]
    print(f"listening http://127.0.0.1:{port}/mcp", flush=True)
    config = uvicorn.Config(build_app(), log_level="warning", lifespan="on", server_header=False, date_header=False)
    try:
        anyio.run(uvicorn.Server(config).serve, [sock])
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it shut down on
        pass


if __name__ == "__main__":
    main()
