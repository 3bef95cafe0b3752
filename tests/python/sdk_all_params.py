#!/usr/bin/env python3
"""Sends one request with EVERY parameter of an official SDK's create call, through the proxy, and prints one JSON
line: {"sent": [top-level body keys], "missing": [SDK parameters this script does not set], "status": ..., "error":
...}. The proxy refuses fields it does not know towards external providers; this shows that every parameter an
agent can pass through the current SDKs is one it knows.

    python sdk_all_params.py --base-url http://127.0.0.1:PORT --api-key KEY {openai-chat|openai-responses|
        openai-responses-beta|anthropic-messages|anthropic-messages-beta}

`missing` lists the SDK's parameters (read from its TypedDict of create parameters) that the request did not set;
the test asserts it is empty, so a new SDK parameter fails the test until it is covered here and in the proxy's
known fields.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"], "additionalProperties": False}

# Parameters the SDKs send as headers or query, not in the body.
NOT_BODY = {"betas", "user_profile_id", "workspace_id", "extra_headers", "extra_query", "extra_body", "timeout"}


def params_of(typed_dict) -> set[str]:
    keys: set[str] = set()
    for klass in typed_dict.__mro__:
        keys |= set(getattr(klass, "__annotations__", {}))
    return keys


def openai_chat() -> tuple[dict, set[str]]:
    from openai.types.chat import completion_create_params as p

    kwargs = dict(
        model="gpt-4.1-mini",
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "hello", "name": "agent"},
        ],
        audio={"voice": "alloy", "format": "wav"},
        frequency_penalty=0.1,
        function_call="auto",
        functions=[{"name": "lookup", "description": "Looks up.", "parameters": SCHEMA}],
        logit_bias={"50256": -100},
        logprobs=True,
        max_completion_tokens=50,
        max_tokens=50,
        metadata={"team": "support"},
        modalities=["text"],
        moderation=None,
        n=1,
        parallel_tool_calls=False,
        prediction={"type": "content", "content": "hello"},
        presence_penalty=0.1,
        prompt_cache_key="cache-1",
        prompt_cache_options={},
        prompt_cache_retention="24h",
        reasoning_effort="low",
        response_format={"type": "text"},
        safety_identifier="user-hash-1",
        seed=7,
        service_tier="auto",
        stop=["END"],
        store=False,
        stream=False,
        stream_options=None,
        temperature=0.2,
        tool_choice="auto",
        tools=[{"type": "function", "function": {"name": "search", "description": "Search.", "parameters": SCHEMA}}],
        top_logprobs=2,
        top_p=0.9,
        user="user-1",
        verbosity="low",
        web_search_options={"search_context_size": "low"},
    )
    return kwargs, params_of(p.CompletionCreateParamsNonStreaming)


def openai_responses(beta: bool) -> tuple[dict, set[str]]:
    if beta:
        from openai.types.beta import response_create_params as p
    else:
        from openai.types.responses import response_create_params as p

    kwargs = dict(
        model="gpt-4.1-mini",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}],
        access_programs={},
        background=False,
        background_options={},
        context_management=[],
        conversation=None,
        image={},
        include=["message.output_text.logprobs"],
        instructions="Be brief.",
        max_output_tokens=50,
        max_tool_calls=2,
        metadata={"team": "support"},
        moderation=None,
        parallel_tool_calls=False,
        previous_response_id=None,
        prompt={"id": "pmpt_123", "version": "2", "variables": {"name": "agent"}},
        prompt_cache_key="cache-1",
        prompt_cache_options={},
        prompt_cache_retention="24h",
        reasoning={"effort": "low"},
        safety_identifier="user-hash-1",
        service_tier="auto",
        store=False,
        stream=False,
        stream_options=None,
        temperature=0.2,
        text={"format": {"type": "text"}},
        tool_choice="auto",
        tools=[
            {"type": "function", "name": "search", "description": "Search.", "parameters": SCHEMA, "strict": True},
            {"type": "web_search_preview"},
        ],
        top_logprobs=2,
        top_p=0.9,
        truncation="auto",
        user="user-1",
    )
    if beta:
        kwargs["multi_agent"] = {"enabled": False}
        kwargs["betas"] = ["responses_multi_agent=v1"]
    return kwargs, params_of(p.ResponseCreateParamsNonStreaming)


def anthropic_messages(beta: bool) -> tuple[dict, set[str]]:
    if beta:
        from anthropic.types.beta import message_create_params as p
    else:
        from anthropic.types import message_create_params as p

    kwargs = dict(
        model="claude-sonnet-4-5",
        max_tokens=50,
        messages=[{"role": "user", "content": "hello"}],
        cache_control={"type": "ephemeral"},
        container=None,
        diagnostics={},
        inference_geo="us",
        metadata={"user_id": "user-1"},
        output_config={},
        service_tier="auto",
        speed="standard",
        stop_sequences=["END"],
        stream=False,
        system=[{"type": "text", "text": "Be brief."}],
        thinking={"type": "disabled"},
        tool_choice={"type": "auto"},
        tools=[
            {"name": "search", "description": "Search.", "input_schema": SCHEMA},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 1},
        ],
        user_profile_id="prof_1",
        workspace_id="wrkspc_1",
    )
    if beta:
        kwargs.update(
            billing_policy=None,
            compaction=None,
            context_management=None,
            fallback_credit_token=None,
            fallbacks=[{"model": "claude-haiku-4-5"}],
            mcp_servers=[{"type": "url", "name": "crm", "url": "https://mcp.example.com/crm"}],
            thread=None,
            betas=["mcp-client-2025-04-04", "server-side-fallback-2026-07-01"],
        )
        kwargs["container"] = {"skills": [{"type": "anthropic", "skill_id": "pptx"}]}
    return kwargs, params_of(p.MessageCreateParamsNonStreaming)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument(
        "api",
        choices=["openai-chat", "openai-responses", "openai-responses-beta", "anthropic-messages", "anthropic-messages-beta"],
    )
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    if args.api.startswith("openai"):
        import openai

        client = openai.OpenAI(
            base_url=args.base_url.rstrip("/") + "/v1",
            api_key=args.api_key,
            max_retries=0,
            http_client=openai.DefaultHttpxClient(trust_env=False),
        )
        if args.api == "openai-chat":
            kwargs, known = openai_chat()
            call = client.chat.completions.with_raw_response.create
        elif args.api == "openai-responses":
            kwargs, known = openai_responses(beta=False)
            call = client.responses.with_raw_response.create
        else:
            kwargs, known = openai_responses(beta=True)
            call = client.beta.responses.with_raw_response.create
        errors = (openai.APIStatusError,)
    else:
        import anthropic

        client = anthropic.Anthropic(
            base_url=args.base_url.rstrip("/"),
            api_key=args.api_key,
            max_retries=0,
            http_client=anthropic.DefaultHttpxClient(trust_env=False),
        )
        if args.api == "anthropic-messages":
            kwargs, known = anthropic_messages(beta=False)
            call = client.messages.with_raw_response.create
        else:
            kwargs, known = anthropic_messages(beta=True)
            call = client.beta.messages.with_raw_response.create
        errors = (anthropic.APIStatusError,)
    # A parameter given as None goes out as JSON null: its key still reaches the proxy's field check.
    missing = sorted(known - set(kwargs))
    sent = sorted(k for k in kwargs if k not in NOT_BODY)
    out = {"sent": sent, "missing": missing}
    try:
        raw = call(**kwargs)
        out["status"] = raw.status_code
    except errors as e:
        out["status"] = e.status_code
        body = e.body if isinstance(e.body, dict) else {}
        out["error"] = body.get("error", body)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
