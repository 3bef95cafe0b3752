#!/usr/bin/env python3
"""A fake LLM upstream for the proxy's integration tests: OpenAI Chat Completions, OpenAI Responses and
Anthropic Messages, non-streamed and streamed (SSE), in the providers' wire formats.

Stdlib only. Usage:

    python fake_upstream.py [--port 0] [--verbose]

Binds 127.0.0.1, prints one line `{"port": N}` on stdout, then serves until killed (HTTP/1.1, keep-alive).

Endpoints
    POST /v1/chat/completions   OpenAI chat        ("stream": true -> `data: {...}` chunks, then `data: [DONE]`)
    POST /v1/responses          OpenAI Responses   ("stream": true -> `event: response.*` events)
    POST /v1/messages           Anthropic Messages ("stream": true -> `event: message_start` ... `message_stop`)
    GET  /v1/models             model list (OpenAI's shape; Anthropic's when the request has `anthropic-version`)
    GET  /_requests             JSON list of every request received so far (not /_requests or /_reset):
                                {"method", "path", "headers" (lower-case names), "body" (parsed JSON, raw text
                                when it is not JSON, null when empty), "raw" (the body's text as received)}
    POST /_reset                clears that list
    anything else               404 with OpenAI's error JSON

The reply is driven by the text of the last user turn (chat: last `user` message; Anthropic: last `user` message's
text blocks; Responses: `input` when it is a string, else the last `user` item; several text parts are joined
with "\n"):
    default      "Echo: " + that text; streamed in deltas of 3-7 characters
    [[tool]]     when the request offers tools: a call to the FIRST offered tool with arguments
                 {"query": <text without "[[tool]]", stripped>} (chat `tool_calls` / finish_reason `tool_calls`;
                 Responses `function_call` item; Anthropic `tool_use` block / stop_reason `tool_use`); streamed
                 arguments come in fragments of 3-7 characters
    [[cut]]      streamed: about half of the events, then the connection is closed without the terminating
                 chunk; not streamed: the connection is closed without any response
    [[error500]] 500 with the provider's error JSON; [[error429]] likewise 429
    [[slow]]     0.2 s between streamed events
    [[big]]      a reply text of 100 KiB (102400 characters)
    [[last]]     "Noted: " + the last word of that text (markers removed): the reply repeats one value
                 without the words around it
    [[shadow]]   chat, like atdp-serve with a version in shadow: a `model` without "@" is answered as
                 `<model>@v1` (`x-atdp-policy-version`) and names `<model>@v2` in `x-atdp-shadow`; a
                 `model` with "@" is answered as that version, its reply beginning "Candidate: "
                 instead of "Echo: "
    [[shadowbad]] chat: `x-atdp-shadow: <model>@base`, which names no version
When the conversation ends with a tool result (chat: a `tool` message; Anthropic: a user turn with only
`tool_result` blocks; Responses: a final `function_call_output` item), the reply is "Echo: " + the tool
result's text and [[tool]] does not trigger another call (markers in that text still apply otherwise).
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import socket
import string
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
FINGERPRINT = "fp_f5bdcc3276"
DELTA_SIZES = (4, 7, 3, 6, 5)  # cycled: every delta is 3-7 characters long
BIG_CHARS = 100 * 1024
SLOW_SECONDS = 0.2
MARKERS = ("tool", "cut", "error500", "error429", "slow", "big", "last", "shadow", "shadowbad")

_requests: list[dict] = []
_requests_lock = threading.Lock()


# ----------------------------------------------------------------------------------------------- helpers


def rand(chars: str, n: int) -> str:
    return "".join(secrets.choice(chars) for _ in range(n))


def split_deltas(s: str) -> list[str]:
    out, i, k = [], 0, 0
    while i < len(s):
        n = DELTA_SIZES[k % len(DELTA_SIZES)]
        out.append(s[i : i + n])
        i += n
        k += 1
    return out


def compact(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def tokens(s: str) -> int:
    return max(1, (len(s) + 3) // 4)


def content_text(content) -> str:
    """Text of a message `content`: a string, or a list of text parts (text / input_text / output_text)."""
    if isinstance(content, str):
        return content
    parts = []
    if isinstance(content, list):
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text"):
                if isinstance(p.get("text"), str):
                    parts.append(p["text"])
    return "\n".join(parts)


class Plan:
    """What to answer: text or a tool call, and which [[markers]] apply."""

    def __init__(self, text: str, tool_result: bool, tool_name: str | None):
        self.prompt = text
        self.markers = {m for m in MARKERS if f"[[{m}]]" in text}
        self.tool_name = tool_name if ("tool" in self.markers and not tool_result and tool_name) else None
        if self.tool_name:
            query = text.replace("[[tool]]", "").strip()
            self.arguments = compact({"query": query})
            self.text = ""
        else:
            self.arguments = ""
            reply = "Echo: " + text
            if "last" in self.markers:
                words = text.replace("[[last]]", " ").split()
                reply = "Noted: " + (words[-1] if words else "")
            if "big" in self.markers and len(reply) < BIG_CHARS:
                filler = "The quick brown fox jumps over the lazy dog. "
                reply += " " + (filler * (BIG_CHARS // len(filler) + 1))
                reply = reply[:BIG_CHARS]
            self.text = reply

    @property
    def is_tool(self) -> bool:
        return self.tool_name is not None

    @property
    def output_tokens(self) -> int:
        return tokens(self.arguments if self.is_tool else self.text)


def chat_plan(body: dict) -> Plan:
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    messages = [m for m in messages if isinstance(m, dict)]
    text, tool_result = "", False
    if messages and messages[-1].get("role") in ("tool", "function"):
        text, tool_result = content_text(messages[-1].get("content")), True
    else:
        for m in reversed(messages):
            if m.get("role") == "user":
                text = content_text(m.get("content"))
                break
    name = None
    for t in body.get("tools") or []:
        if isinstance(t, dict):
            inner = t.get(t.get("type") or "function")
            if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                name = inner["name"]
                break
    return Plan(text, tool_result, name)


def responses_plan(body: dict) -> Plan:
    inp = body.get("input")
    text, tool_result = "", False
    if isinstance(inp, str):
        text = inp
    elif isinstance(inp, list):
        items = [i for i in inp if isinstance(i, dict)]
        if items and items[-1].get("type") in ("function_call_output", "custom_tool_call_output"):
            out = items[-1].get("output")
            text, tool_result = content_text(out), True
        else:
            for it in reversed(items):
                if it.get("role") == "user" and it.get("type", "message") == "message":
                    text = content_text(it.get("content"))
                    break
    name = None
    for t in body.get("tools") or []:
        if isinstance(t, dict) and isinstance(t.get("name"), str):
            name = t["name"]
            break
    return Plan(text, tool_result, name)


def anthropic_plan(body: dict) -> Plan:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    text, tool_result = "", False
    for m in reversed(messages):
        if m.get("role") != "user":
            continue
        c = m.get("content")
        text = content_text(c)
        if isinstance(c, list) and not any(isinstance(b, dict) and b.get("type") == "text" for b in c):
            results = [b for b in c if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results:
                text, tool_result = "\n".join(content_text(b.get("content")) for b in results), True
        break
    name = None
    for t in body.get("tools") or []:
        if isinstance(t, dict) and isinstance(t.get("name"), str):
            name = t["name"]
            break
    return Plan(text, tool_result, name)


def openai_error(message: str, type_: str, code=None, param=None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def anthropic_error(type_: str, message: str) -> dict:
    return {"type": "error", "error": {"type": type_, "message": message}, "request_id": "req_011C" + rand(ALNUM, 20)}


# ----------------------------------------------------------------------------------------------- handler


class Aborted(Exception):
    """The handler closed the connection on purpose ([[cut]])."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    verbose = False

    def version_string(self):
        return "fake-upstream/1"

    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, format, *args):  # noqa: A002
        if self.verbose:
            sys.stderr.write("fake_upstream: %s - %s\n" % (self.address_string(), format % args))

    # --- plumbing

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = bytearray()
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline(65537)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _headers_dict(self) -> dict:
        out: dict[str, str] = {}
        for k, v in self.headers.items():
            k = k.lower()
            out[k] = f"{out[k]}, {v}" if k in out else v
        return out

    def _record(self, raw: bytes):
        text = raw.decode("utf-8", errors="replace")
        body = None
        if text:
            try:
                body = json.loads(text)
            except ValueError:
                body = text
        with _requests_lock:
            _requests.append(
                {"method": self.command, "path": self.path, "headers": self._headers_dict(), "body": body, "raw": text}
            )

    def _send_json(self, status: int, obj, headers: dict | None = None, pretty: bool = False):
        data = (json.dumps(obj, indent=2, ensure_ascii=False) if pretty else compact(obj)).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _abort(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        raise Aborted()

    def _stream(self, events: list[bytes], plan: Plan, headers: dict):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.flush()
        limit = len(events) // 2 if "cut" in plan.markers else len(events)
        for i, ev in enumerate(events[:limit]):
            if i and "slow" in plan.markers:
                time.sleep(SLOW_SECONDS)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
            self.wfile.flush()
        if "cut" in plan.markers:
            self._abort()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _guard(self, fn):
        try:
            fn()
        except Aborted:
            pass
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            self.close_connection = True
        except Exception:
            self.close_connection = True
            traceback.print_exc(file=sys.stderr)

    def do_GET(self):
        self._guard(self._get)

    def do_POST(self):
        self._guard(self._post)

    def do_PUT(self):
        self._guard(self._other)

    def do_PATCH(self):
        self._guard(self._other)

    def do_DELETE(self):
        self._guard(self._other)

    def _other(self):
        raw = self._read_body()
        self._record(raw)
        self._not_found()

    def _not_found(self):
        path = self.path.split("?", 1)[0]
        self._send_json(
            404,
            openai_error(f"Invalid URL ({self.command} {path})", "invalid_request_error"),
            {"x-request-id": "req_" + rand(HEX, 32)},
            pretty=True,
        )

    def _get(self):
        path = self.path.split("?", 1)[0]
        raw = self._read_body()
        if path == "/_requests":
            with _requests_lock:
                snapshot = list(_requests)
            self._send_json(200, snapshot)
            return
        self._record(raw)
        if path == "/v1/models":
            if self.headers.get("anthropic-version"):
                models = [
                    ("claude-sonnet-4-5-20250929", "Claude Sonnet 4.5", "2025-09-29T00:00:00Z"),
                    ("claude-haiku-4-5-20251001", "Claude Haiku 4.5", "2025-10-01T00:00:00Z"),
                    ("claude-opus-4-1-20250805", "Claude Opus 4.1", "2025-08-05T00:00:00Z"),
                ]
                data = [{"type": "model", "id": i, "display_name": n, "created_at": c} for i, n, c in models]
                obj = {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}
                self._send_json(200, obj, {"request-id": "req_011C" + rand(ALNUM, 20)})
            else:
                ids = ["gpt-4.1-mini", "gpt-4.1", "gpt-4o-mini", "gpt-5-mini"]
                data = [{"id": i, "object": "model", "created": 1744316542, "owned_by": "system"} for i in ids]
                self._send_json(200, {"object": "list", "data": data}, {"x-request-id": "req_" + rand(HEX, 32)}, pretty=True)
            return
        self._not_found()

    def _post(self):
        path = self.path.split("?", 1)[0]
        raw = self._read_body()
        if path == "/_reset":
            with _requests_lock:
                n = len(_requests)
                _requests.clear()
            self._send_json(200, {"cleared": n})
            return
        self._record(raw)
        api = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "anthropic"}.get(path)
        if api is None:
            self._not_found()
            return
        try:
            body = json.loads(raw.decode("utf-8"))
        except ValueError:
            body = None
        if not isinstance(body, dict):
            if api == "anthropic":
                self._anthropic_error(400, "invalid_request_error", "There was an issue with the body of your request: invalid JSON")
            else:
                self._openai_error(
                    400,
                    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
                    "HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid "
                    "JSON. If you have trouble figuring out how to fix this, please contact us through our help "
                    "center at help.openai.com.)",
                    "invalid_request_error",
                )
            return
        getattr(self, "_" + api)(body, raw)

    def _openai_error(self, status: int, message: str, type_: str, code=None, param=None):
        self._send_json(
            status,
            openai_error(message, type_, code, param),
            {"x-request-id": "req_" + rand(HEX, 32)},
            pretty=True,
        )

    def _anthropic_error(self, status: int, type_: str, message: str):
        obj = anthropic_error(type_, message)
        self._send_json(status, obj, {"request-id": obj["request_id"]})

    def _common_openai_markers(self, plan: Plan, model: str) -> bool:
        """Handles [[error*]] and non-streamed [[cut]]; True when the request has been answered."""
        if "error500" in plan.markers:
            self._openai_error(500, "The server had an error while processing your request. Sorry about that!", "server_error")
            return True
        if "error429" in plan.markers:
            self._openai_error(
                429,
                f"Rate limit reached for {model} in organization org-fake on requests per min (RPM): "
                "Limit 3, Used 3, Requested 1. Please try again in 20s.",
                "requests",
                code="rate_limit_exceeded",
            )
            return True
        return False

    # --- OpenAI chat completions

    def _chat(self, body: dict, raw: bytes):
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return self._openai_error(400, "you must provide a model parameter", "invalid_request_error")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return self._openai_error(400, "Missing required parameter: 'messages'.", "invalid_request_error", "missing_required_parameter", "messages")
        plan = chat_plan(body)
        if self._common_openai_markers(plan, model):
            return
        stream = body.get("stream") is True
        if "cut" in plan.markers and not stream:
            self._abort()
        cid = "chatcmpl-" + rand(ALNUM, 29)
        created = int(time.time())
        call_id = "call_" + rand(ALNUM, 24)
        prompt_tokens = tokens(raw.decode("utf-8", errors="replace"))
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": plan.output_tokens,
            "total_tokens": prompt_tokens + plan.output_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        finish = "tool_calls" if plan.is_tool else "stop"
        headers = {"x-request-id": "req_" + rand(HEX, 32), "openai-processing-ms": "42", "openai-version": "2020-10-01"}
        if "shadow" in plan.markers:
            if "@" in model:
                headers["x-atdp-policy-version"] = model
                if not plan.is_tool:
                    plan.text = "Candidate: " + plan.text.removeprefix("Echo: ")
            else:
                headers["x-atdp-policy-version"] = model + "@v1"
                headers["x-atdp-shadow"] = model + "@v2"
        if "shadowbad" in plan.markers:
            headers["x-atdp-shadow"] = model + "@base"
        # Like vLLM: `logprobs: true` adds per-token log-probabilities, `return_token_ids: true`
        # the completion's token ids (one "token" per delta here; ids are the delta's length).
        want_logprobs = body.get("logprobs") is True
        want_ids = body.get("return_token_ids") is True

        def logprobs_of(piece: str):
            if not want_logprobs or not piece:
                return None
            return {"content": [{"token": piece, "logprob": -0.25, "bytes": list(piece.encode("utf-8")), "top_logprobs": []}], "refusal": None}

        if not stream:
            if plan.is_tool:
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": call_id, "type": "function", "function": {"name": plan.tool_name, "arguments": plan.arguments}}
                    ],
                    "refusal": None,
                    "annotations": [],
                }
            else:
                message = {"role": "assistant", "content": plan.text, "refusal": None, "annotations": []}
            obj = {
                "id": cid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                "usage": usage,
                "service_tier": "default",
                "system_fingerprint": FINGERPRINT,
            }
            pieces = split_deltas(plan.text) if not plan.is_tool else []
            if want_logprobs and pieces:
                obj["choices"][0]["logprobs"] = {"content": [logprobs_of(p)["content"][0] for p in pieces], "refusal": None}
            if want_ids:
                obj["choices"][0]["token_ids"] = [len(p) for p in pieces]
            return self._send_json(200, obj, headers, pretty=True)

        opts = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
        include_usage = opts.get("include_usage") is True
        obfuscate = opts.get("include_obfuscation") is not False
        rng = random.Random(cid)
        events: list[bytes] = []

        def chunk(choices, usage_value=None):
            d = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "service_tier": "default",
                "system_fingerprint": FINGERPRINT,
                "choices": choices,
            }
            if include_usage:
                d["usage"] = usage_value
            if obfuscate:
                d["obfuscation"] = "".join(rng.choice(ALNUM) for _ in range(rng.randint(2, 12)))
            events.append(("data: " + compact(d) + "\n\n").encode("utf-8"))

        def choice(delta, finish_reason=None):
            piece = delta.get("content") or ""
            c = {"index": 0, "delta": delta, "logprobs": logprobs_of(piece), "finish_reason": finish_reason}
            if want_ids and piece:
                c["token_ids"] = [len(piece)]
            return [c]

        if plan.is_tool:
            first = {
                "index": 0,
                "id": call_id,
                "type": "function",
                "function": {"name": plan.tool_name, "arguments": ""},
            }
            chunk(choice({"role": "assistant", "content": None, "tool_calls": [first], "refusal": None}))
            for frag in split_deltas(plan.arguments):
                chunk(choice({"tool_calls": [{"index": 0, "function": {"arguments": frag}}]}))
        else:
            chunk(choice({"role": "assistant", "content": "", "refusal": None}))
            for piece in split_deltas(plan.text):
                chunk(choice({"content": piece}))
        chunk(choice({}, finish))
        if include_usage:
            chunk([], usage)
        events.append(b"data: [DONE]\n\n")
        self._stream(events, plan, headers)

    # --- OpenAI Responses

    def _responses(self, body: dict, raw: bytes):
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return self._openai_error(400, "Missing required parameter: 'model'.", "invalid_request_error", "missing_required_parameter", "model")
        plan = responses_plan(body)
        if self._common_openai_markers(plan, model):
            return
        stream = body.get("stream") is True
        if "cut" in plan.markers and not stream:
            self._abort()
        rid = "resp_" + rand(HEX, 50)
        created = int(time.time())
        input_tokens = tokens(raw.decode("utf-8", errors="replace"))
        usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": plan.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + plan.output_tokens,
        }
        tools = []
        for t in body.get("tools") or []:
            if isinstance(t, dict) and t.get("type") == "function":
                t = {
                    "type": "function",
                    "description": t.get("description"),
                    "name": t.get("name"),
                    "parameters": t.get("parameters"),
                    "strict": t.get("strict", True),
                }
            tools.append(t)

        def response(status: str, output: list, final: bool) -> dict:
            return {
                "id": rid,
                "object": "response",
                "created_at": created,
                "status": status,
                "background": False,
                "completed_at": int(time.time()) if final else None,
                "error": None,
                "incomplete_details": None,
                "instructions": body.get("instructions"),
                "max_output_tokens": body.get("max_output_tokens"),
                "max_tool_calls": body.get("max_tool_calls"),
                "model": model,
                "output": output,
                "parallel_tool_calls": body.get("parallel_tool_calls", True),
                "previous_response_id": body.get("previous_response_id"),
                "prompt_cache_key": body.get("prompt_cache_key"),
                "prompt_cache_retention": None,
                "reasoning": {"effort": None, "summary": None},
                "safety_identifier": body.get("safety_identifier"),
                "service_tier": "default" if final else "auto",
                "store": body.get("store", True),
                "temperature": body.get("temperature", 1.0),
                "text": {"format": {"type": "text"}, "verbosity": "medium"},
                "tool_choice": body.get("tool_choice", "auto"),
                "tools": tools,
                "top_logprobs": 0,
                "top_p": body.get("top_p", 1.0),
                "truncation": "disabled",
                "usage": usage if final else None,
                "user": body.get("user"),
                "metadata": body.get("metadata") or {},
            }

        if plan.is_tool:
            item_id = "fc_" + rand(HEX, 50)
            call_id = "call_" + rand(ALNUM, 24)

            def item(status: str, arguments: str) -> dict:
                return {
                    "id": item_id,
                    "type": "function_call",
                    "status": status,
                    "arguments": arguments,
                    "call_id": call_id,
                    "name": plan.tool_name,
                }

            final_item = item("completed", plan.arguments)
        else:
            item_id = "msg_" + rand(HEX, 50)

            def part(text: str) -> dict:
                return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}

            def item(status: str, content: list) -> dict:
                return {"id": item_id, "type": "message", "status": status, "content": content, "role": "assistant"}

            final_item = item("completed", [part(plan.text)])
        headers = {"x-request-id": "req_" + rand(HEX, 32), "openai-processing-ms": "42", "openai-version": "2020-10-01"}
        if not stream:
            return self._send_json(200, response("completed", [final_item], True), headers, pretty=True)

        rng = random.Random(rid)
        events: list[bytes] = []

        def event(type_: str, **fields):
            d = {"type": type_, "sequence_number": len(events)}
            d.update(fields)
            events.append(("event: " + type_ + "\ndata: " + compact(d) + "\n\n").encode("utf-8"))

        def obf() -> str:
            return "".join(rng.choice(ALNUM) for _ in range(rng.randint(2, 12)))

        event("response.created", response=response("in_progress", [], False))
        event("response.in_progress", response=response("in_progress", [], False))
        if plan.is_tool:
            event("response.output_item.added", output_index=0, item=item("in_progress", ""))
            for frag in split_deltas(plan.arguments):
                event("response.function_call_arguments.delta", item_id=item_id, output_index=0, delta=frag, obfuscation=obf())
            event("response.function_call_arguments.done", item_id=item_id, output_index=0, arguments=plan.arguments)
        else:
            event("response.output_item.added", output_index=0, item=item("in_progress", []))
            event("response.content_part.added", item_id=item_id, output_index=0, content_index=0, part=part(""))
            for piece in split_deltas(plan.text):
                event(
                    "response.output_text.delta",
                    item_id=item_id,
                    output_index=0,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                    obfuscation=obf(),
                )
            event("response.output_text.done", item_id=item_id, output_index=0, content_index=0, text=plan.text, logprobs=[])
            event("response.content_part.done", item_id=item_id, output_index=0, content_index=0, part=part(plan.text))
        event("response.output_item.done", output_index=0, item=final_item)
        event("response.completed", response=response("completed", [final_item], True))
        self._stream(events, plan, headers)

    # --- Anthropic messages

    def _anthropic(self, body: dict, raw: bytes):
        model = body.get("model")
        for field, ok in (
            ("model", isinstance(model, str) and model),
            ("messages", isinstance(body.get("messages"), list)),
            ("max_tokens", isinstance(body.get("max_tokens"), int)),
        ):
            if not ok:
                return self._anthropic_error(400, "invalid_request_error", f"{field}: Field required")
        plan = anthropic_plan(body)
        if "error500" in plan.markers:
            return self._anthropic_error(500, "api_error", "Internal server error")
        if "error429" in plan.markers:
            return self._anthropic_error(
                429,
                "rate_limit_error",
                "This request would exceed the rate limit for your organization of 50 requests per minute. "
                "For details, refer to: https://docs.claude.com/en/api/rate-limits.",
            )
        stream = body.get("stream") is True
        if "cut" in plan.markers and not stream:
            self._abort()
        mid = "msg_01" + rand(ALNUM, 22)
        tool_id = "toolu_01" + rand(ALNUM, 22)
        input_tokens = tokens(raw.decode("utf-8", errors="replace"))
        stop_reason = "tool_use" if plan.is_tool else "end_turn"

        def usage(output_tokens: int) -> dict:
            return {
                "input_tokens": input_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
                "output_tokens": output_tokens,
                "service_tier": "standard",
            }

        def message(content: list, stop, output_tokens: int) -> dict:
            return {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage(output_tokens),
            }

        request_id = "req_011C" + rand(ALNUM, 20)
        headers = {"request-id": request_id}
        if not stream:
            if plan.is_tool:
                content = [{"type": "tool_use", "id": tool_id, "name": plan.tool_name, "input": json.loads(plan.arguments)}]
            else:
                content = [{"type": "text", "text": plan.text}]
            return self._send_json(200, message(content, stop_reason, plan.output_tokens), headers)

        events: list[bytes] = []

        def event(type_: str, data: str):
            events.append(("event: " + type_ + "\ndata: " + data + "\n\n").encode("utf-8"))

        def ev(obj: dict):
            event(obj["type"], compact(obj))

        ev({"type": "message_start", "message": message([], None, 1)})
        if plan.is_tool:
            block = {"type": "tool_use", "id": tool_id, "name": plan.tool_name, "input": {}}
            ev({"type": "content_block_start", "index": 0, "content_block": block})
            event("ping", '{"type": "ping"}')
            ev({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}})
            for frag in split_deltas(plan.arguments):
                ev({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": frag}})
        else:
            ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
            event("ping", '{"type": "ping"}')
            for piece in split_deltas(plan.text):
                ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}})
        ev({"type": "content_block_stop", "index": 0})
        ev(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {
                    "input_tokens": input_tokens,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": plan.output_tokens,
                },
            }
        )
        ev({"type": "message_stop"})
        self._stream(events, plan, headers)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0, help="port to bind on 127.0.0.1 (0: any free port)")
    ap.add_argument("--verbose", action="store_true", help="log each request on stderr")
    ap.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (with --tls-key)")
    ap.add_argument("--tls-key", help="the certificate's PEM private key")
    args = ap.parse_args()
    Handler.verbose = args.verbose
    server = Server(("127.0.0.1", args.port), Handler)
    if args.tls_cert:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        context.set_alpn_protocols(["http/1.1"])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    sys.stdout.write(json.dumps({"port": server.server_address[1]}) + "\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
