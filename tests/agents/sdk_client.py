#!/usr/bin/env python3
"""The official `anthropic` and `openai` Python SDKs against one base URL, each answer read by the
SDK's own parsers (its SSE decoder, its stream accumulators, its models), printed as one JSON
document on stdout for the caller to compare between a recorded and a replayed run.

Usage: sdk_client.py BASE_URL     (BASE_URL = http://127.0.0.1:PORT, no /v1)

Calls, in order (the fake provider answers a request without a tool result with a call to the
offered tool `echo`, and one with a tool result with "FINAL: <result>"):
  anthropic  messages.stream(...)                 -> tool call (MessageStream, get_final_message)
  anthropic  messages.create(stream=True)         -> text, from the raw event objects
  anthropic  messages.create()                    -> text (Message)
  anthropic  messages.count_tokens() x2           -> input_tokens, of the question and the history
  openai     chat.completions.create(stream=True) -> tool call, from the chunks' deltas
  openai     chat.completions.create()            -> text (ChatCompletion)
  openai     responses.create(stream=True)        -> tool call, from the typed events
  openai     responses.create()                   -> text (Response.output_text)
Every client is made with max_retries=0: an error is reported, never retried.
"""

import json
import sys

import anthropic
import openai

TOOL_RESULT = "Echo: hello from the SDK"
ECHO_SCHEMA = {"type": "object", "properties": {"message": {"type": "string"}},
               "required": ["message"]}


def step(out, name, fn):
    try:
        out[name] = fn()
    except Exception as e:  # noqa: BLE001 - the error is the observation
        out[name] = {"error": f"{type(e).__name__}: {e}"}


def anthropic_calls(base, out):
    c = anthropic.Anthropic(base_url=base, api_key="sk-ant-sdk-test-key", max_retries=0)
    tools = [{"name": "echo", "description": "Echoes a message.", "input_schema": ECHO_SCHEMA}]
    ask = [{"role": "user", "content": "Call echo with a greeting."}]

    def stream_tool_call():
        with c.messages.stream(model="claude-fake", max_tokens=256, messages=ask,
                               tools=tools) as s:
            texts = list(s.text_stream)
            final = s.get_final_message()
        return {"text_stream": texts, "final": final.model_dump(mode="json")}

    step(out, "anthropic.messages.stream", stream_tool_call)
    tool_use = (out["anthropic.messages.stream"].get("final") or {}).get("content", [{}])[-1]
    history = ask + [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Calling echo."},
            {"type": "tool_use", "id": tool_use.get("id", "toolu_x"), "name": "echo",
             "input": tool_use.get("input", {})}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_use.get("id", "toolu_x"),
             "content": TOOL_RESULT}]},
    ]

    def create_stream():
        events, text, stop = [], "", None
        for ev in c.messages.create(model="claude-fake", max_tokens=256, messages=history,
                                    tools=tools, stream=True):
            events.append(ev.type)
            if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                text += ev.delta.text
            if ev.type == "message_delta":
                stop = ev.delta.stop_reason
        return {"events": events, "text": text, "stop_reason": stop}

    step(out, "anthropic.messages.create(stream=True)", create_stream)

    def create():
        m = c.messages.create(model="claude-fake", max_tokens=256, messages=history, tools=tools)
        return {"text": "".join(b.text for b in m.content if b.type == "text"),
                "message": m.model_dump(mode="json")}

    step(out, "anthropic.messages.create", create)

    def count(messages):
        return lambda: c.messages.count_tokens(model="claude-fake", messages=messages,
                                               tools=tools).model_dump(mode="json")

    step(out, "anthropic.messages.count_tokens(ask)", count(ask))
    step(out, "anthropic.messages.count_tokens(history)", count(history))


def openai_calls(base, out):
    c = openai.OpenAI(base_url=base + "/v1", api_key="sk-openai-sdk-test-key", max_retries=0)
    tools = [{"type": "function", "function": {
        "name": "echo", "description": "Echoes a message.", "parameters": ECHO_SCHEMA}}]
    ask = [{"role": "user", "content": "Call echo with a greeting."}]

    def chat_stream():
        calls, chunks, finish = {}, 0, None
        for ch in c.chat.completions.create(model="gpt-fake", messages=ask, tools=tools,
                                            stream=True, stream_options={"include_usage": True}):
            chunks += 1
            for choice in ch.choices:
                for tc in choice.delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                    slot["id"] = tc.id or slot["id"]
                    if tc.function is not None:
                        slot["name"] += tc.function.name or ""
                        slot["arguments"] += tc.function.arguments or ""
                finish = choice.finish_reason or finish
            usage = ch.usage.model_dump(mode="json") if ch.usage else None
        return {"tool_calls": [calls[i] for i in sorted(calls)], "chunks": chunks,
                "finish_reason": finish, "usage": usage}

    step(out, "openai.chat.completions.create(stream=True)", chat_stream)
    tc = (out["openai.chat.completions.create(stream=True)"].get("tool_calls") or [{}])[0]

    def chat():
        history = ask + [
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": tc.get("id") or "call_x", "type": "function",
                "function": {"name": "echo", "arguments": tc.get("arguments") or "{}"}}]},
            {"role": "tool", "tool_call_id": tc.get("id") or "call_x", "content": TOOL_RESULT},
        ]
        r = c.chat.completions.create(model="gpt-fake", messages=history, tools=tools)
        return {"text": r.choices[0].message.content, "completion": r.model_dump(mode="json")}

    step(out, "openai.chat.completions.create", chat)

    rtools = [{"type": "function", "name": "echo", "description": "Echoes a message.",
               "parameters": ECHO_SCHEMA}]

    def responses_stream():
        types, args, done = [], "", None
        for ev in c.responses.create(model="gpt-fake", input="Call echo with a greeting.",
                                     tools=rtools, stream=True):
            types.append(ev.type)
            if ev.type == "response.function_call_arguments.delta":
                args += ev.delta
            if ev.type == "response.completed":
                done = ev.response
        calls = [o.model_dump(mode="json") for o in done.output if o.type == "function_call"]
        return {"events": types, "arguments_from_deltas": args, "function_calls": calls,
                "status": done.status}

    step(out, "openai.responses.create(stream=True)", responses_stream)
    fc = (out["openai.responses.create(stream=True)"].get("function_calls") or [{}])[0]

    def responses():
        inp = [{"role": "user", "content": "Call echo with a greeting."},
               {"type": "function_call", "call_id": fc.get("call_id") or "call_x",
                "name": "echo", "arguments": fc.get("arguments") or "{}"},
               {"type": "function_call_output", "call_id": fc.get("call_id") or "call_x",
                "output": TOOL_RESULT}]
        r = c.responses.create(model="gpt-fake", input=inp, tools=rtools)
        return {"text": r.output_text, "response": r.model_dump(mode="json")}

    step(out, "openai.responses.create", responses)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    base = sys.argv[1].rstrip("/")
    out = {"versions": {"anthropic": anthropic.__version__, "openai": openai.__version__}}
    anthropic_calls(base, out)
    openai_calls(base, out)
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
