"""A Gymnasium-style environment as an environment command of `atdp-eval` and `atdp-loop`.

`atdp-eval`, the gate and automatic rollback play a custom environment by running a command
(docs/loop.md, "A command environment"): the command gets

    --base-url URL --model MODEL --seeds FIRST:COUNT --temperature T

(and `ATDP_API_KEY` in its environment when there is a key), plays those episodes against the
OpenAI chat API at `URL`, and prints one JSON line per episode on stdout. `serve_env_command`
is such a command for an environment with Gymnasium's interface and an agent function
`act(client, observation, info)`:

    import atdp
    atdp.serve_env_command(MyEnv, act)

Each episode is `reset(seed=seed)` then `act` and `step` until the environment terminates or
truncates it (or `max_steps`). `act`'s client is an `openai.OpenAI` client whose
`chat.completions.create` is recorded: `model` is always the one asked for, `temperature`
defaults to the one asked for, the first call's messages become the episode's `prompt` (the
gate's KL check), and each call's completion tokens and model (the serving version) are
counted. The episode's reward is its return; `success` is the last step's `info["success"]`
when the environment sets it (else the return > 0); a step whose `info["invalid_reply"]` is
true counts as an invalid reply. An episode that raises prints a line with `error` (the
exception's type, never its message) and the next seed is played. While episodes run, what
the environment or the agent prints goes to stderr: stdout carries only the episode lines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from atdp.env import Environment
from atdp.trajectory import Trajectory


@dataclass
class _Record:
    """What the calls of one episode did."""

    turns: int = 0
    completion_tokens: int = 0
    versions: list[str] = field(default_factory=list)
    prompt: list[dict[str, Any]] | None = None


def _text_parts(content: Any) -> Any:
    """A message's content as the line carries it: text, or its text parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return [
            {"type": "text", "text": part["text"]}
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
    return None


def _plain_messages(messages: Any) -> list[dict[str, Any]]:
    """The role and text of each message (dicts or SDK objects)."""
    out = []
    for message in messages:
        if not isinstance(message, dict):
            dump = getattr(message, "model_dump", None)
            message = dump() if callable(dump) else {}
        role = message.get("role")
        if isinstance(role, str):
            out.append({"role": role, "content": _text_parts(message.get("content"))})
    return out


class _Completions:
    def __init__(self, inner: Any, model: str, temperature: float, record: _Record) -> None:
        self._inner = inner
        self._model = model
        self._temperature = temperature
        self._record = record

    def create(self, **kwargs: Any) -> Any:
        """`chat.completions.create`, recorded; whole replies only (no `stream`)."""
        if kwargs.get("stream"):
            raise ValueError("serve_env_command counts whole replies: call without stream=True")
        kwargs["model"] = self._model
        kwargs.setdefault("temperature", self._temperature)
        if self._record.prompt is None and kwargs.get("messages") is not None:
            self._record.prompt = _plain_messages(kwargs["messages"])
        completion = self._inner.chat.completions.create(**kwargs)
        self._record.turns += 1
        usage = getattr(completion, "usage", None)
        self._record.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
        version = getattr(completion, "model", None)
        if isinstance(version, str) and version:
            self._record.versions.append(version)
        return completion


class _Chat:
    def __init__(self, completions: _Completions) -> None:
        self.completions = completions


class RecordingClient:
    """The client `act` gets: `chat.completions.create` recorded for the episode; every other
    attribute is the episode's `openai.OpenAI` client's."""

    def __init__(self, inner: Any, model: str, temperature: float, record: _Record) -> None:
        self._inner = inner
        self.chat = _Chat(_Completions(inner, model, temperature, record))

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("_inner")
        if inner is None or name.startswith("_"):
            raise AttributeError(name)
        return getattr(inner, name)


def _seeds(text: str) -> range:
    first, _, count = text.partition(":")
    try:
        start, n = int(first), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIRST:COUNT") from None
    if start < 0 or n < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: seeds and counts are not negative")
    return range(start, start + n)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Plays episodes of an environment for atdp-eval and atdp-loop's gate"
    )
    parser.add_argument("--base-url", required=True, help="the OpenAI API root to call")
    parser.add_argument("--model", required=True, help="the model to ask for")
    parser.add_argument("--seeds", required=True, type=_seeds, help="FIRST:COUNT")
    parser.add_argument("--temperature", type=float, default=1.0)
    return parser


def play_episode(
    env: Environment,
    act: Callable[[Any, Any, dict[str, Any]], Any],
    client: Any,
    *,
    model: str,
    seed: int,
    temperature: float = 1.0,
    max_steps: int = 1000,
) -> dict[str, Any]:
    """Plays episode `seed` with `act` calling the model through `client` (an `openai.OpenAI`
    client); returns its line of the protocol."""
    record = _Record()
    with Trajectory(client) as run:
        recording = RecordingClient(run.client, model, temperature, record)
        observation, info = env.reset(seed=seed)
        episode_return, invalid, success = 0.0, 0, None
        for _ in range(max_steps):
            action = act(recording, observation, info)
            observation, reward, terminated, truncated, info = env.step(action)
            value = float(reward)
            if not math.isfinite(value):
                raise ValueError("the environment's reward is not a finite number")
            episode_return += value
            if info.get("invalid_reply"):
                invalid += 1
            if isinstance(info.get("success"), bool):
                success = info["success"]
            if terminated or truncated:
                break
        line: dict[str, Any] = {
            "seed": seed,
            "reward": episode_return,
            "turns": record.turns,
            "completion_tokens": record.completion_tokens,
            "invalid_replies": invalid,
            "versions": record.versions,
            "trajectory_id": run.trajectory_id,
        }
    if success is not None:
        line["success"] = success
    if record.prompt:
        line["prompt"] = record.prompt
    return line


def serve_env_command(
    make_env: Callable[[], Environment],
    act: Callable[[Any, Any, dict[str, Any]], Any],
    *,
    argv: Sequence[str] | None = None,
    max_steps: int = 1000,
    out: TextIO | None = None,
) -> None:
    """Runs as an environment command: parses the protocol's arguments from `argv` (by default
    the process's; other arguments are left to the caller), makes one environment with
    `make_env()`, plays each seed with `act(client, observation, info)`, and prints one JSON
    line per episode on `out` (stdout)."""
    import openai

    args, _ = _parser().parse_known_args(sys.argv[1:] if argv is None else list(argv))
    out = out if out is not None else sys.stdout
    client = openai.OpenAI(base_url=args.base_url, api_key=os.environ.get("ATDP_API_KEY", "none"))
    with contextlib.redirect_stdout(sys.stderr):
        env = make_env()
    for seed in args.seeds:
        try:
            with contextlib.redirect_stdout(sys.stderr):
                line = play_episode(
                    env,
                    act,
                    client,
                    model=args.model,
                    seed=seed,
                    temperature=args.temperature,
                    max_steps=max_steps,
                )
        except Exception as e:  # the episode fails, the others are still played
            status = getattr(e, "status_code", None)
            error = type(e).__name__ + (f" (HTTP {status})" if status is not None else "")
            line = {"seed": seed, "error": error}
        out.write(json.dumps(line) + "\n")
        out.flush()
