#!/usr/bin/env python3
"""Runs one scenario with the official `openai` / `anthropic` Python SDKs and prints ONE JSON line with what the
SDK returned, for the Rust integration tests to assert on.

    python sdk_client.py --base-url http://127.0.0.1:PORT --api-key KEY SCENARIO
        [--model M] [--text T] [--header K=V ...] [--messages-json FILE] [--timeout S] [--strict]

OpenAI scenarios use `openai.OpenAI(base_url=<base>/v1, ...)`, Anthropic ones `anthropic.Anthropic(base_url=<base>,
...)`, both with `max_retries=0` and proxies from the environment ignored.

Scenarios (`--text` default "hello"; "[[tool]] hello" for the *tools* ones, which offer one function
`search(query: string)`; `--model` default gpt-4.1-mini / claude-sonnet-4-5):
    openai-chat, openai-chat-stream, openai-chat-tools, openai-chat-tools-stream
        chat.completions.create; streams use stream_options={"include_usage": True}
    openai-responses, openai-responses-stream, openai-responses-tools, openai-responses-tools-stream
        responses.create (stream=True for the streams)
    openai-responses-stream-helper
        the responses.stream(...) helper and get_final_response()
    anthropic-messages, anthropic-tools
        messages.create
    anthropic-messages-stream, anthropic-tools-stream
        the messages.stream(...) helper and get_final_message()

Output keys (absent ones do not apply to the scenario):
    id, model, text (final text; null when the reply has none), finish_reason (OpenAI chat), status (Responses),
    stop_reason (Anthropic), usage (as the SDK parsed it), tool_calls (list of {id, name, arguments} — arguments is
    the JSON string for OpenAI; {id, name, input} with the parsed object for Anthropic; Responses items also
    carry item_id), headers ({x-atdp-step-id, x-atdp-trajectory-id}, only those present),
    streams: chunks (OpenAI chat chunks) or events (Responses events / raw Anthropic events), streamed_text (the
    deltas joined), streamed_arguments (tool-argument fragments joined).
On an API error (an HTTP 4xx/5xx, or an Anthropic `event: error` mid-stream) it prints
    {"error": {"status": <http status>, "type": <error.type from the body>, "message": ..., "code": ...},
     "headers": {...}}
and exits 0. Any other exception (connection cut, invalid response) exits 1 with the traceback on stderr.

--messages-json FILE: a JSON list sent as `messages` (chat, Anthropic) or `input` (Responses) instead of the one
user message made from --text; or a JSON object whose keys are merged into the request (e.g. {"messages": [...],
"system": "..."}).
--header K=V (repeatable): default headers on every request (e.g. x-atdp-trajectory-id=...).
--strict: the SDKs' strict response validation (`_strict_response_validation=True`): every body and stream event
must validate against the SDK's types.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

STEP_HEADERS = ("x-atdp-step-id", "x-atdp-trajectory-id")

OPENAI_SCENARIOS = (
    "openai-chat",
    "openai-chat-stream",
    "openai-chat-tools",
    "openai-chat-tools-stream",
    "openai-responses",
    "openai-responses-stream",
    "openai-responses-stream-helper",
    "openai-responses-tools",
    "openai-responses-tools-stream",
)
ANTHROPIC_SCENARIOS = (
    "anthropic-messages",
    "anthropic-messages-stream",
    "anthropic-tools",
    "anthropic-tools-stream",
)

QUERY_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "What to search for."}},
    "required": ["query"],
    "additionalProperties": False,
}
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {"name": "search", "description": "Search for information.", "parameters": QUERY_SCHEMA},
    }
]
RESPONSES_TOOLS = [
    {"type": "function", "name": "search", "description": "Search for information.", "parameters": QUERY_SCHEMA, "strict": True}
]
ANTHROPIC_TOOLS = [{"name": "search", "description": "Search for information.", "input_schema": QUERY_SCHEMA}]


def pick_headers(headers) -> dict:
    out = {}
    for k in STEP_HEADERS:
        v = headers.get(k) if headers is not None else None
        if v is not None:
            out[k] = v
    return out


def dump(model_obj):
    return None if model_obj is None else model_obj.to_dict()


def request_body(args, default_key: str) -> dict:
    """`messages` / `input` (plus any extra keys) for the request."""
    if args.messages_json:
        with open(args.messages_json, encoding="utf-8") as f:
            given = json.load(f)
        if isinstance(given, list):
            return {default_key: given}
        if isinstance(given, dict):
            return dict(given)
        raise SystemExit("--messages-json: expected a JSON list or object")
    return {default_key: [{"role": "user", "content": args.text}]}


# ----------------------------------------------------------------------------------------------- OpenAI


def openai_client(args):
    import openai

    return openai.OpenAI(
        base_url=args.base_url.rstrip("/") + "/v1",
        api_key=args.api_key,
        max_retries=0,
        timeout=args.timeout,
        default_headers=args.headers or None,
        http_client=openai.DefaultHttpxClient(trust_env=False),
        _strict_response_validation=args.strict,
    )


def chat_tool_calls(message_tool_calls) -> list:
    return [{"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments} for tc in message_tool_calls or []]


def run_openai_chat(client, args, tools: bool, stream: bool) -> dict:
    kwargs = request_body(args, "messages")
    kwargs.setdefault("model", args.model)
    if tools:
        kwargs.setdefault("tools", CHAT_TOOLS)
    if not stream:
        raw = client.chat.completions.with_raw_response.create(**kwargs)
        c = raw.parse()
        choice = c.choices[0]
        return {
            "id": c.id,
            "model": c.model,
            "text": choice.message.content,
            "finish_reason": choice.finish_reason,
            "usage": dump(c.usage),
            "tool_calls": chat_tool_calls(choice.message.tool_calls),
            "headers": pick_headers(raw.headers),
        }
    kwargs.setdefault("stream_options", {"include_usage": True})
    s = client.chat.completions.create(stream=True, **kwargs)
    headers = pick_headers(s.response.headers)
    text, finish, usage, n, cid, model = [], None, None, 0, None, None
    calls: dict[int, dict] = {}
    with s:
        for chunk in s:
            n += 1
            cid, model = chunk.id, chunk.model
            if chunk.usage is not None:
                usage = dump(chunk.usage)
            for ch in chunk.choices:
                if ch.delta.content:
                    text.append(ch.delta.content)
                for tc in ch.delta.tool_calls or []:
                    acc = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                    if tc.id:
                        acc["id"] = tc.id
                    if tc.function is not None:
                        if tc.function.name:
                            acc["name"] = tc.function.name
                        if tc.function.arguments:
                            acc["arguments"] += tc.function.arguments
                if ch.finish_reason is not None:
                    finish = ch.finish_reason
    return {
        "id": cid,
        "model": model,
        "text": "".join(text) if text else None,
        "finish_reason": finish,
        "usage": usage,
        "tool_calls": [calls[i] for i in sorted(calls)],
        "chunks": n,
        "headers": headers,
    }


def responses_tool_calls(output) -> list:
    return [
        {"id": it.call_id, "item_id": it.id, "name": it.name, "arguments": it.arguments}
        for it in output
        if it.type == "function_call"
    ]


def final_response_fields(r) -> dict:
    return {
        "id": r.id,
        "model": r.model,
        "status": r.status,
        "text": r.output_text if any(it.type == "message" for it in r.output) else None,
        "usage": dump(r.usage),
        "tool_calls": responses_tool_calls(r.output),
    }


def run_openai_responses(client, args, tools: bool, stream: bool, helper: bool = False) -> dict:
    kwargs = request_body(args, "input")
    kwargs.setdefault("model", args.model)
    if tools:
        kwargs.setdefault("tools", RESPONSES_TOOLS)
    if not stream:
        raw = client.responses.with_raw_response.create(**kwargs)
        return {**final_response_fields(raw.parse()), "headers": pick_headers(raw.headers)}

    streamed, args_frags, n, final = [], [], 0, None
    if helper:
        with client.responses.stream(**kwargs) as s:
            http_response = getattr(s, "response", None) or getattr(s, "_response", None)
            headers = pick_headers(http_response.headers if http_response is not None else None)
            for ev in s:
                n += 1
                if ev.type == "response.output_text.delta":
                    streamed.append(ev.delta)
                elif ev.type == "response.function_call_arguments.delta":
                    args_frags.append(ev.delta)
            final = s.get_final_response()
    else:
        s = client.responses.create(stream=True, **kwargs)
        headers = pick_headers(s.response.headers)
        with s:
            for ev in s:
                n += 1
                if ev.type == "response.output_text.delta":
                    streamed.append(ev.delta)
                elif ev.type == "response.function_call_arguments.delta":
                    args_frags.append(ev.delta)
                elif ev.type in ("response.completed", "response.failed", "response.incomplete"):
                    final = ev.response
    out = final_response_fields(final) if final is not None else {"status": None, "text": None}
    out.update(
        {
            "streamed_text": "".join(streamed) if streamed else None,
            "streamed_arguments": "".join(args_frags) if args_frags else None,
            "events": n,
            "headers": headers,
        }
    )
    return out


# ----------------------------------------------------------------------------------------------- Anthropic

RAW_ANTHROPIC_EVENTS = {
    "message_start",
    "message_delta",
    "message_stop",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
}


def anthropic_client(args):
    import anthropic

    return anthropic.Anthropic(
        base_url=args.base_url.rstrip("/"),
        api_key=args.api_key,
        max_retries=0,
        timeout=args.timeout,
        default_headers=args.headers or None,
        http_client=anthropic.DefaultHttpxClient(trust_env=False),
        _strict_response_validation=args.strict,
    )


def message_fields(m) -> dict:
    texts = [b.text for b in m.content if b.type == "text"]
    return {
        "id": m.id,
        "model": m.model,
        "text": "".join(texts) if texts else None,
        "stop_reason": m.stop_reason,
        "usage": dump(m.usage),
        "tool_calls": [{"id": b.id, "name": b.name, "input": b.input} for b in m.content if b.type == "tool_use"],
    }


def run_anthropic(client, args, tools: bool, stream: bool) -> dict:
    kwargs = request_body(args, "messages")
    kwargs.setdefault("model", args.model)
    kwargs.setdefault("max_tokens", 1024)
    if tools:
        kwargs.setdefault("tools", ANTHROPIC_TOOLS)
    if not stream:
        raw = client.messages.with_raw_response.create(**kwargs)
        return {**message_fields(raw.parse()), "headers": pick_headers(raw.headers)}
    streamed, args_frags, n = [], [], 0
    with client.messages.stream(**kwargs) as s:
        headers = pick_headers(s.response.headers)
        for ev in s:
            if ev.type in RAW_ANTHROPIC_EVENTS:
                n += 1
            if ev.type == "text":
                streamed.append(ev.text)
            elif ev.type == "input_json":
                args_frags.append(ev.partial_json)
        final = s.get_final_message()
    out = message_fields(final)
    out.update(
        {
            "streamed_text": "".join(streamed) if streamed else None,
            "streamed_arguments": "".join(args_frags) if args_frags else None,
            "events": n,
            "headers": headers,
        }
    )
    return out


# ----------------------------------------------------------------------------------------------- main


def run(args) -> dict:
    sc = args.scenario
    if sc in OPENAI_SCENARIOS:
        client = openai_client(args)
        tools, stream = "-tools" in sc, sc.endswith("-stream") or sc.endswith("-stream-helper")
        if sc.startswith("openai-chat"):
            return run_openai_chat(client, args, tools, stream)
        return run_openai_responses(client, args, tools, stream, helper=sc.endswith("-helper"))
    client = anthropic_client(args)
    return run_anthropic(client, args, "-tools" in sc, sc.endswith("-stream"))


def error_output(e) -> dict:
    body = getattr(e, "body", None)
    type_, message, code = getattr(e, "type", None), None, getattr(e, "code", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        type_ = inner.get("type", type_)
        message = inner.get("message")
        code = inner.get("code", code)
    if not isinstance(message, str):
        message = getattr(e, "message", None) or str(e)
    response = getattr(e, "response", None)
    return {
        "error": {"status": getattr(e, "status_code", None), "type": type_, "message": message, "code": code},
        "headers": pick_headers(response.headers if response is not None else None),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description="Run one scenario with the official SDKs; print one JSON line.")
    ap.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8080 (OpenAI scenarios add /v1)")
    ap.add_argument("--api-key", required=True)
    ap.add_argument("scenario", choices=OPENAI_SCENARIOS + ANTHROPIC_SCENARIOS)
    ap.add_argument("--model")
    ap.add_argument("--text")
    ap.add_argument("--header", action="append", default=[], metavar="K=V", help="default header (repeatable)")
    ap.add_argument("--messages-json", metavar="FILE")
    ap.add_argument("--timeout", type=float, default=60.0, help="request timeout in seconds (default 60)")
    ap.add_argument("--strict", action="store_true", help="SDK strict response validation")
    args = ap.parse_args()

    is_openai = args.scenario in OPENAI_SCENARIOS
    if args.model is None:
        args.model = "gpt-4.1-mini" if is_openai else "claude-sonnet-4-5"
    if args.text is None:
        args.text = "[[tool]] hello" if "-tools" in args.scenario else "hello"
    args.headers = {}
    for h in args.header:
        k, sep, v = h.partition("=")
        if not sep or not k:
            ap.error(f"--header {h!r}: expected K=V")
        args.headers[k] = v

    # Import only the SDK in use (anthropic alone takes ~1.5 s to import).
    if is_openai:
        import openai as sdk
    else:
        import anthropic as sdk

    # The SDKs warn about models they consider deprecated (e.g. claude-sonnet-4-5); keep stderr for real failures.
    warnings.filterwarnings("ignore", message=r"The model .* is deprecated", category=DeprecationWarning)
    try:
        out = run(args)
    except sdk.APIStatusError as e:
        out = error_output(e)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
