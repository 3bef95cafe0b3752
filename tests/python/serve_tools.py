#!/usr/bin/env python3
"""Drives `atdp-serve` (directly or through `atdp-proxy`) with the official `openai` SDK and the OpenAI Agents SDK
(`openai-agents`), with one function tool, and prints ONE JSON line of what they got, for
deploy/tests/it/tools.rs to assert on.

    python serve_tools.py --base-url http://127.0.0.1:PORT [--model M] [--api-key KEY]

The base URL is `atdp-serve`'s, or the proxy's in front of it (then `--api-key` is the agent's
key).

The tool is `get_weather(city: "Paris" | "Oslo" | "Lima", unit: "c" | "f")`; every call forces it
(`tool_choice` names it, or `"required"` for the agent), because a tiny random model never
chooses a tool by itself. The SDK clients use `max_retries=0`, and the `openai` client strict
response validation (`_strict_response_validation=True`): every body and chunk must match the
SDK's types.

Output keys:
    create, create_stream, stream_helper: chat.completions.create (whole), create(stream=True)
        with the chunks put back together, and the chat.completions.stream(...) helper's final
        completion; each {finish_reason, content, tool_calls: [{id, type, name, arguments}],
        token_ids (the extension field, from the choice or the last chunk), chunks}
    agent, agent_streamed: Runner.run and Runner.run_streamed of an Agent on
        OpenAIChatCompletionsModel with ModelSettings(tool_choice="required") and
        tool_use_behavior="stop_on_first_tool"; each {final_output, calls: [{city, unit}]}
Any exception exits 1 with the traceback on stderr.
"""

import argparse
import asyncio
import json
from typing import Any, Literal

from openai import AsyncOpenAI, OpenAI

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    }
]
FORCED = {"type": "function", "function": {"name": "get_weather"}}
MESSAGES = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "What is the weather in Oslo?"},
]


def extra(obj: Any, key: str) -> Any:
    """An extension field the SDK keeps on its model (pydantic extra)."""
    return (getattr(obj, "model_extra", None) or {}).get(key)


def calls_of(tool_calls: Any) -> list:
    return [
        {"id": c.id, "type": c.type, "name": c.function.name, "arguments": c.function.arguments}
        for c in tool_calls or []
    ]


def run_openai(base_url: str, model: str, api_key: str) -> dict:
    client = OpenAI(
        base_url=base_url + "/v1",
        api_key=api_key,
        max_retries=0,
        _strict_response_validation=True,
    )
    common = dict(
        model=model,
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice=FORCED,
        parallel_tool_calls=False,
        temperature=1.0,
        max_tokens=96,
    )
    out = {}

    whole = client.chat.completions.create(**common)
    choice = whole.choices[0]
    out["create"] = {
        "finish_reason": choice.finish_reason,
        "content": choice.message.content,
        "tool_calls": calls_of(choice.message.tool_calls),
        "token_ids": extra(choice, "token_ids"),
    }

    calls: dict = {}
    finish, token_ids, content, chunks = None, None, "", 0
    for chunk in client.chat.completions.create(**common, stream=True):
        chunks += 1
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        content += c.delta.content or ""
        for d in c.delta.tool_calls or []:
            call = calls.setdefault(d.index, {"id": None, "type": None, "name": "", "arguments": ""})
            if d.id:
                call["id"] = d.id
            if d.type:
                call["type"] = d.type
            if d.function and d.function.name:
                call["name"] += d.function.name
            if d.function and d.function.arguments:
                call["arguments"] += d.function.arguments
        if c.finish_reason:
            finish = c.finish_reason
            token_ids = extra(c, "token_ids")
    out["create_stream"] = {
        "finish_reason": finish,
        "content": content,
        "tool_calls": [calls[i] for i in sorted(calls)],
        "token_ids": token_ids,
        "chunks": chunks,
    }

    token_ids = None
    with client.chat.completions.stream(**common) as stream:
        for event in stream:
            if event.type == "chunk" and event.chunk.choices:
                ids = extra(event.chunk.choices[0], "token_ids")
                token_ids = ids if ids is not None else token_ids
        final = stream.get_final_completion()
    choice = final.choices[0]
    out["stream_helper"] = {
        "finish_reason": choice.finish_reason,
        "content": choice.message.content,
        "tool_calls": calls_of(choice.message.tool_calls),
        "token_ids": token_ids,
    }
    return out


async def run_agents(base_url: str, model_name: str, api_key: str) -> dict:
    set_tracing_disabled(True)
    out = {}
    for mode in ("agent", "agent_streamed"):
        calls: list = []

        @function_tool
        def get_weather(city: Literal["Paris", "Oslo", "Lima"], unit: Literal["c", "f"]) -> str:
            """The weather in a city."""
            calls.append({"city": city, "unit": unit})
            return f"{city}: 12 degrees {unit}"

        client = AsyncOpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0)
        agent = Agent(
            name="weather",
            instructions="Use the tools.",
            tools=[get_weather],
            model=OpenAIChatCompletionsModel(model=model_name, openai_client=client),
            model_settings=ModelSettings(
                tool_choice="required", temperature=1.0, max_tokens=96, parallel_tool_calls=False
            ),
            tool_use_behavior="stop_on_first_tool",
        )
        if mode == "agent":
            result = await Runner.run(agent, "What is the weather in Oslo?", max_turns=2)
        else:
            result = Runner.run_streamed(agent, "What is the weather in Oslo?", max_turns=2)
            async for _ in result.stream_events():
                pass
        out[mode] = {"final_output": result.final_output, "calls": calls}
        await client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="agent")
    parser.add_argument("--api-key", default="unused")
    args = parser.parse_args()
    report = run_openai(args.base_url, args.model, args.api_key)
    report.update(asyncio.run(run_agents(args.base_url, args.model, args.api_key)))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
