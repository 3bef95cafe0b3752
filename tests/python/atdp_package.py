"""The `atdp` Python package (python/src/atdp) against a running atdp proxy.

Run by proxy/tests/it/python_package.rs with `PYTHONPATH=<repo>/python/src`:

    atdp_package.py --base-url http://127.0.0.1:<port> --api-key KEY calls
        Trajectories through the openai and anthropic clients, sync and async, plain and
        streamed; step and trajectory rewards, one of them retried after its answer was lost;
        a wrong key. Prints one JSON line: {"trajectories": {id: [step ids]}, "reward_ids":
        [ids sent, each once], "retried_reward_id": id}, for the caller to check in the lake.

    atdp_package.py --base-url ... --api-key KEY unavailable
        Against a proxy whose write-ahead log has failed (rewards answer 503
        `recording_unavailable`, Retry-After: 5): the client retries as configured, then raises
        UnavailableError. Prints {"attempts": N, "waited_s": S} for sync and async.

    atdp_package.py --base-url ... --api-key KEY episodes
        Episodes of a Gymnasium-style environment through `atdp.env.TrajectoryEnv`, with
        per-step rewards: one that terminates, one truncated by `run_episode`'s `max_steps`;
        then rewards the proxy refuses, raised and kept for `flush()`.
        Prints {"episodes": [{"trajectory_id", "step_ids", "return", "terminated",
        "truncated", "seed", "reward_ids"}]}.

Every check is an assert: a failure exits 1 with the assertion on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import http.server
import json
import threading
import time
import uuid
import warnings
from typing import Any
from urllib.parse import urlsplit

import anthropic
import httpx2
import openai

import atdp

OPENAI_MODEL = "gpt-4.1-mini"
ANTHROPIC_MODEL = "claude-sonnet-4-5"
warnings.filterwarnings("ignore", message=".*deprecated.*")


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def http_client() -> httpx2.Client:
    # trust_env=False: proxy variables in the environment never reroute 127.0.0.1.
    return httpx2.Client(trust_env=False)


def async_http_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(trust_env=False)


def check_trajectory(run: atdp.Trajectory[Any], answered: list[str], what: str) -> None:
    """The calls of `run` joined its trajectory (the proxy echoes the trajectory it placed
    each call in) and `step_ids` holds the proxy's step ids, in order."""
    assert len(answered) == 2, what
    assert run.step_ids == answered, f"{what}: step_ids {run.step_ids} != replies {answered}"
    assert len(set(answered)) == 2, f"{what}: two calls, two steps: {answered}"


def openai_sync(base_url: str, key: str, out: dict[str, list[str]]) -> None:
    """Two chat calls, the second streamed, through an OpenAI client."""
    client = openai.OpenAI(
        base_url=f"{base_url}/v1", api_key=key, max_retries=0, http_client=openai.DefaultHttpxClient(trust_env=False)
    )
    with atdp.trajectory(client) as run:
        answered = []
        raw = run.client.chat.completions.with_raw_response.create(model=OPENAI_MODEL, messages=user("one"))
        assert raw.headers["x-atdp-trajectory-id"] == run.trajectory_id, raw.headers
        assert raw.parse().choices[0].message.content == "Echo: one"
        answered.append(raw.headers["x-atdp-step-id"])
        with run.client.chat.completions.with_streaming_response.create(
            model=OPENAI_MODEL, messages=user("two"), stream=True
        ) as streamed:
            assert streamed.headers["x-atdp-trajectory-id"] == run.trajectory_id
            answered.append(streamed.headers["x-atdp-step-id"])
            text = "".join(c.choices[0].delta.content or "" for c in streamed.parse() if c.choices)
        assert text == "Echo: two", text
    uuid.UUID(run.trajectory_id)  # generated: a UUID
    check_trajectory(run, answered, "openai")
    # The original client is unchanged: its calls carry no trajectory header, so the proxy
    # groups them in a trajectory of its own.
    raw = client.chat.completions.with_raw_response.create(model=OPENAI_MODEL, messages=user("alone"))
    assert raw.headers["x-atdp-trajectory-id"] != run.trajectory_id
    out[run.trajectory_id] = run.step_ids


def anthropic_sync(base_url: str, key: str, out: dict[str, list[str]]) -> None:
    """A message and a streamed message (the `stream()` helper) in a named trajectory."""
    client = anthropic.Anthropic(
        base_url=base_url, api_key=key, max_retries=0, http_client=anthropic.DefaultHttpxClient(trust_env=False)
    )
    named = f"agent-run-{uuid.uuid4()}"
    with atdp.trajectory(client, trajectory_id=named) as run:
        raw = run.client.messages.with_raw_response.create(model=ANTHROPIC_MODEL, max_tokens=64, messages=user("three"))
        assert raw.headers["x-atdp-trajectory-id"] == named
        answered = [raw.headers["x-atdp-step-id"]]
        with run.client.messages.stream(model=ANTHROPIC_MODEL, max_tokens=64, messages=user("four")) as stream:
            assert stream.response.headers["x-atdp-trajectory-id"] == named
            answered.append(stream.response.headers["x-atdp-step-id"])
            assert stream.get_final_text() == "Echo: four"
    assert run.trajectory_id == named
    check_trajectory(run, answered, "anthropic")
    out[named] = run.step_ids


async def async_clients(base_url: str, key: str, out: dict[str, list[str]]) -> None:
    """The same through AsyncOpenAI (streamed) and AsyncAnthropic (a session key)."""
    client = openai.AsyncOpenAI(
        base_url=f"{base_url}/v1",
        api_key=key,
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(trust_env=False),
    )
    async with atdp.trajectory(client) as run:
        raw = await run.client.chat.completions.with_raw_response.create(model=OPENAI_MODEL, messages=user("five"))
        answered = [raw.headers["x-atdp-step-id"]]
        assert raw.headers["x-atdp-trajectory-id"] == run.trajectory_id
        async with run.client.chat.completions.with_streaming_response.create(
            model=OPENAI_MODEL, messages=user("six"), stream=True
        ) as streamed:
            answered.append(streamed.headers["x-atdp-step-id"])
            assert streamed.headers["x-atdp-trajectory-id"] == run.trajectory_id
            chunks = [c async for c in await streamed.parse()]
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Echo: six"
    check_trajectory(run, answered, "async openai")
    out[run.trajectory_id] = run.step_ids

    client_a = anthropic.AsyncAnthropic(
        base_url=base_url,
        api_key=key,
        max_retries=0,
        http_client=anthropic.DefaultAsyncHttpxClient(trust_env=False),
    )
    session = f"session-{uuid.uuid4()}"
    async with atdp.trajectory(client_a, session=session) as run_a:
        try:
            run_a.trajectory_id
            raise AssertionError("a session's trajectory is unknown before the first reply")
        except LookupError:
            pass
        first = await run_a.client.messages.with_raw_response.create(
            model=ANTHROPIC_MODEL, max_tokens=64, messages=user("seven")
        )
        second = await run_a.client.messages.with_raw_response.create(
            model=ANTHROPIC_MODEL, max_tokens=64, messages=user("eight")
        )
    proxy_chose = first.headers["x-atdp-trajectory-id"]
    assert second.headers["x-atdp-trajectory-id"] == proxy_chose, "one session, one trajectory"
    assert run_a.trajectory_id == proxy_chose
    check_trajectory(run_a, [first.headers["x-atdp-step-id"], second.headers["x-atdp-step-id"]], "async anthropic")
    out[proxy_chose] = run_a.step_ids


class LosesFirstAnswer(http.server.BaseHTTPRequestHandler):
    """A relay in front of the proxy that forwards every request but drops the proxy's first
    answer (closes the connection without it), as a network failure after the proxy acted
    would: the client sees a broken connection for a reward that was recorded."""

    target: tuple[str, int]
    dropped = threading.Event()
    requests: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 (the http.server name)
        body = self.rfile.read(int(self.headers["content-length"]))
        self.requests.append(body)
        upstream = http.client.HTTPConnection(*self.target, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        upstream.request("POST", self.path, body=body, headers=headers)
        answer = upstream.getresponse()
        payload = answer.read()
        upstream.close()
        if not self.dropped.is_set():
            self.dropped.set()
            self.close_connection = True
            return
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(name, value)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the relay's log would only repeat the request line."""


def rewards(base_url: str, key: str, trajectories: dict[str, list[str]]) -> dict[str, Any]:
    """A trajectory reward and a step reward; a reward whose first answer is lost is retried
    with its reward_id; a wrong key raises AuthenticationError."""
    openai_run = next(iter(trajectories))
    openai_steps = trajectories[openai_run]
    sent = []
    with atdp.Rewards(base_url + "/v1", key, http_client=http_client()) as client:
        whole = client.for_trajectory(openai_run, "resolved", 1.0, terminal=True, tags={"by": "test"})
        assert whole.trajectory_id == openai_run
        uuid.UUID(whole.reward_id)
        step = client.for_step(openai_run, openai_steps[1], "helpful", 0.5, reward_id="helpful-" + openai_steps[1])
        assert step.reward_id == "helpful-" + openai_steps[1]
        sent += [whole.reward_id, step.reward_id]
        batch = client.send(
            [atdp.Reward(trajectory_id=t, name="batch", value=0.25, step_id=s[0]) for t, s in trajectories.items()]
        )
        assert [r.trajectory_id for r in batch] == list(trajectories)
        sent += [r.reward_id for r in batch]
        try:
            client.for_step("another-trajectory", openai_steps[0], "helpful", 1.0)
            raise AssertionError("a step of another trajectory is refused")
        except atdp.InvalidRequestError as error:
            assert (error.status, error.code) == (400, "invalid_reward"), error

    proxy = urlsplit(base_url)
    LosesFirstAnswer.target = (proxy.hostname or "127.0.0.1", proxy.port or 80)
    relay = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LosesFirstAnswer)
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    backoff = atdp.Backoff(max_retries=2, initial_s=0.01)
    with atdp.Rewards(f"http://127.0.0.1:{relay.server_port}", key, backoff=backoff, http_client=http_client()) as client:
        retried = client.for_trajectory(openai_run, "retried", 1.0)
    relay.shutdown()
    assert LosesFirstAnswer.dropped.is_set()
    bodies = [json.loads(b) for b in LosesFirstAnswer.requests]
    assert len(bodies) == 2, "one retry after the lost answer"
    assert bodies[0] == bodies[1], "the retry is the same request, reward_id included"
    assert bodies[0]["rewards"][0]["reward_id"] == retried.reward_id

    wrong = "sk-atdp-not-a-key"
    try:
        atdp.Rewards(base_url, wrong, http_client=http_client()).for_trajectory(openai_run, "x", 1.0)
        raise AssertionError("a wrong key is refused")
    except atdp.AuthenticationError as error:
        assert (error.status, error.code) == (401, "invalid_api_key"), error
        assert wrong not in str(error), "the key is never in an error"

    async def wrong_key_async() -> None:
        async with atdp.AsyncRewards(base_url, "sk-atdp-not-a-key", http_client=async_http_client()) as client:
            await client.for_trajectory(openai_run, "x", 1.0)

    try:
        asyncio.run(wrong_key_async())
        raise AssertionError("a wrong key is refused (async)")
    except atdp.AuthenticationError as error:
        assert error.code == "invalid_api_key"
    return {"reward_ids": sent, "retried_reward_id": retried.reward_id}


def calls(base_url: str, key: str) -> dict[str, Any]:
    trajectories: dict[str, list[str]] = {}
    openai_sync(base_url, key, trajectories)
    anthropic_sync(base_url, key, trajectories)
    asyncio.run(async_clients(base_url, key, trajectories))
    assert len(trajectories) == 4, trajectories
    return {"trajectories": trajectories, **rewards(base_url, key, trajectories)}


def unavailable(base_url: str, key: str) -> dict[str, Any]:
    """Three attempts (two retries), each answered 503 with Retry-After: 5, which the client
    honours up to its cap of 0.4 s: about 0.8 s of waiting, then UnavailableError."""
    backoff = atdp.Backoff(max_retries=2, initial_s=0.01, max_s=0.4)
    attempts: list[str] = []

    def count(request: httpx2.Request) -> None:
        attempts.append(json.loads(request.content)["rewards"][0]["reward_id"])

    async def count_async(request: httpx2.Request) -> None:
        count(request)

    report: dict[str, Any] = {}
    started = time.monotonic()
    sync_client = httpx2.Client(trust_env=False, event_hooks={"request": [count]})
    try:
        atdp.Rewards(base_url, key, backoff=backoff, http_client=sync_client).for_trajectory("t-unavailable", "x", 1.0)
        raise AssertionError("rewards are refused while the log has failed")
    except atdp.UnavailableError as error:
        assert (error.status, error.code, error.retry_after) == (503, "recording_unavailable", 5.0), error
    report["sync"] = {"attempts": len(attempts), "waited_s": round(time.monotonic() - started, 3)}
    assert len(attempts) == 3 and len(set(attempts)) == 1, attempts
    assert 0.8 <= report["sync"]["waited_s"] < 4, report

    async def run_async() -> None:
        client = httpx2.AsyncClient(trust_env=False, event_hooks={"request": [count_async]})
        async with atdp.AsyncRewards(base_url, key, backoff=backoff, http_client=client) as rewards:
            await rewards.for_trajectory("t-unavailable", "x", 1.0)

    attempts.clear()
    started = time.monotonic()
    try:
        asyncio.run(run_async())
        raise AssertionError("rewards are refused while the log has failed (async)")
    except atdp.UnavailableError as error:
        assert error.code == "recording_unavailable", error
    report["async"] = {"attempts": len(attempts), "waited_s": round(time.monotonic() - started, 3)}
    assert len(attempts) == 3 and len(set(attempts)) == 1, attempts
    assert 0.8 <= report["async"]["waited_s"] < 4, report
    return report


class Countdown:
    """A Gymnasium-style environment: the observation is a number counting down from the
    seed's value; each step that answers with the right number scores 1, another answer -1;
    the episode terminates at zero."""

    def __init__(self) -> None:
        self.left = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self.left = 3 if seed is None else 2 + seed % 3
        return self.left, {"start": self.left}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        reward = 1.0 if action == str(self.left) else -1.0
        self.left -= 1
        return self.left, reward, self.left == 0, False, {}


def act(client: openai.OpenAI, observation: Any, info: dict[str, Any]) -> str:
    """The agent: one model call per action (the fake provider echoes the prompt, so the
    number comes back after "Echo: ")."""
    reply = client.chat.completions.create(model=OPENAI_MODEL, messages=user(str(observation)))
    text = reply.choices[0].message.content or ""
    return text.removeprefix("Echo: ")


def episodes(base_url: str, key: str) -> dict[str, Any]:
    client = openai.OpenAI(
        base_url=f"{base_url}/v1", api_key=key, max_retries=0, http_client=openai.DefaultHttpxClient(trust_env=False)
    )
    played = []
    with atdp.Rewards(base_url, key, http_client=http_client()) as rewards:
        env = atdp.TrajectoryEnv(
            Countdown(), client, rewards, reward="countdown", step_reward="countdown_step", tags={"suite": "test"}
        )
        try:
            _ = env.client
            raise AssertionError("no client before reset(): its calls would join no episode")
        except RuntimeError:
            pass
        # Played by hand, as an RL framework drives a Gymnasium environment; the first action
        # takes two calls, and its step reward goes on the second.
        observation, info = env.reset(seed=4)
        assert (observation, info) == (3, {"start": 3})
        first = env.trajectory.trajectory_id
        act(env.client, "thinking", info)
        done = False
        while not done:
            observation, reward, terminated, truncated, info = env.step(act(env.client, observation, info))
            done = terminated or truncated
        episode = info["atdp"]
        assert isinstance(episode, atdp.Episode) and env.episode is episode
        assert (episode.trajectory_id, episode.env_steps, episode.episode_return) == (first, 3, 3.0)
        assert (episode.terminated, episode.truncated) == (True, False)
        assert len(episode.step_ids) == 4 and len(set(episode.step_ids)) == 4, episode
        assert len(episode.rewards) == 4, "the return and one reward per step, in one batch"
        try:
            env.step("1")
            raise AssertionError("an ended episode takes no step: its return would be posted again")
        except RuntimeError:
            pass
        played.append(episode)

        # run_episode, truncated after two of its four steps: a right answer (+1), then a
        # wrong one (-1) chosen without a model call, which carries no step reward.
        answers = iter([True, False])

        def right_then_wrong(c: openai.OpenAI, observation: Any, info: dict[str, Any]) -> str:
            return act(c, observation, info) if next(answers) else "wrong"

        second = atdp.run_episode(env, right_then_wrong, seed=5, max_steps=2)
        assert second.trajectory_id != first
        assert (second.env_steps, second.episode_return, len(second.step_ids)) == (2, 0.0, 1), second
        assert (second.terminated, second.truncated) == (False, True)
        assert len(second.rewards) == 2, second.rewards
        played.append(second)

    # Rewards that cannot be recorded raise at the episode's end and are kept for flush().
    with atdp.Rewards(base_url, "sk-atdp-not-a-key", http_client=http_client()) as refused:
        env = atdp.TrajectoryEnv(Countdown(), client, refused, reward="countdown")
        try:
            atdp.run_episode(env, act, seed=0, max_steps=1)
            raise AssertionError("a refused reward is raised")
        except atdp.AuthenticationError:
            pass
        try:
            env.reset(seed=1)
            raise AssertionError("no new episode while the last one's rewards are unsent")
        except RuntimeError:
            pass
        try:
            env.flush()
            raise AssertionError("flush() sends again, and is refused again")
        except atdp.AuthenticationError:
            pass
    return {
        "episodes": [
            {
                "trajectory_id": e.trajectory_id,
                "step_ids": e.step_ids,
                "return": e.episode_return,
                "terminated": e.terminated,
                "truncated": e.truncated,
                "seed": e.seed,
                "reward_ids": [r.reward_id for r in e.rewards],
            }
            for e in played
        ]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("scenario", choices=["calls", "unavailable", "episodes"])
    args = parser.parse_args()
    scenario = {"calls": calls, "unavailable": unavailable, "episodes": episodes}[args.scenario]
    print(json.dumps(scenario(args.base_url, args.api_key)))


if __name__ == "__main__":
    main()
