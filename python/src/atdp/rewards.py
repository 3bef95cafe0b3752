"""Step and trajectory rewards through the proxy's `POST /v1/atdp/rewards` (docs/proxy.md §6).

Every reward carries a `reward_id` (a UUID4 unless the caller names one), so sending it again
after a failure leaves rows with one id that readers de-duplicate. A request is retried, with
the same ids, when the proxy answers 503 (`recording_unavailable`: its write-ahead log cannot
take rewards now) or cannot be reached; every other refusal is raised at once as the matching
`atdp.errors` exception.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx2

from atdp.errors import AtdpError, UnavailableError, UnreachableError, from_response

REWARDS_PATH = "/v1/atdp/rewards"


def _new_reward_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True)
class Reward:
    """One reward: on a step when `step_id` is set, else on the whole trajectory.

    `trajectory_id` and `step_id` are the `x-atdp-trajectory-id` and `x-atdp-step-id` of a
    reply (`atdp.Trajectory` collects them); `name` is 1 to 64 bytes, `value` a finite number;
    `terminal` says the reward ends the episode; `tags` are string labels.
    """

    trajectory_id: str
    name: str
    value: float
    step_id: str | None = None
    terminal: bool = False
    reward_id: str = field(default_factory=_new_reward_id)
    tags: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The reward as the proxy reads it (a field left at its default is still sent)."""
        body: dict[str, Any] = {
            "trajectory_id": self.trajectory_id,
            "name": self.name,
            "value": self.value,
            "terminal": self.terminal,
            "reward_id": self.reward_id,
            "tags": dict(self.tags),
        }
        if self.step_id is not None:
            body["step_id"] = self.step_id
        return body


@dataclass(frozen=True)
class Recorded:
    """A reward the proxy has made durable: its id and its trajectory."""

    reward_id: str
    trajectory_id: str


@dataclass(frozen=True)
class Backoff:
    """When to retry: up to `max_retries` times after the first attempt, waiting `initial_s`,
    then twice as long each time, or longer when the proxy's `Retry-After` asks for it, but
    never longer than `max_s`."""

    max_retries: int = 3
    initial_s: float = 0.5
    max_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.initial_s < 0 or self.max_s < 0:
            raise ValueError("Backoff takes no negative retries or waits")

    def wait_s(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number `retry` (0 for the first)."""
        exponential = self.initial_s * 2.0**retry
        return min(self.max_s, max(exponential, retry_after or 0.0))


def _reward(
    trajectory_id: str,
    step_id: str | None,
    name: str,
    value: float,
    terminal: bool,
    reward_id: str | None,
    tags: Mapping[str, str] | None,
) -> Reward:
    return Reward(
        trajectory_id=trajectory_id,
        name=name,
        value=value,
        step_id=step_id,
        terminal=terminal,
        reward_id=reward_id or _new_reward_id(),
        tags=tags or {},
    )


def _rewards_url(base_url: str) -> str:
    """The endpoint under the proxy's root; a base URL ending in `/v1` (an OpenAI client's)
    names the same root."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + REWARDS_PATH


def _request_body(rewards: Iterable[Reward]) -> bytes:
    # allow_nan=False: NaN and infinities are not JSON, and not valid rewards either.
    return json.dumps(
        {"rewards": [reward.to_json() for reward in rewards]}, allow_nan=False
    ).encode()


def _recorded(response: httpx2.Response) -> list[Recorded]:
    """The answer's `rewards` list, or the exception for a refusal."""
    if not response.is_success:
        raise from_response(response)
    return [
        Recorded(reward_id=item["reward_id"], trajectory_id=item["trajectory_id"])
        for item in response.json()["rewards"]
    ]


def _wait_before_retry(backoff: Backoff, error: AtdpError, retry: int) -> float | None:
    """Seconds to wait before sending a failed request again, or None when a retry cannot
    help (a refusal other than 503) or the retries are spent."""
    if retry >= backoff.max_retries:
        return None
    if isinstance(error, UnavailableError):
        return backoff.wait_s(retry, error.retry_after)
    if isinstance(error, UnreachableError):
        return backoff.wait_s(retry, None)
    return None


def _unreachable(error: httpx2.TransportError) -> UnreachableError:
    return UnreachableError(None, None, f"the proxy could not be reached: {type(error).__name__}")


class Rewards:
    """Sends rewards to the proxy at `base_url` with the agent's atdp key.

    `base_url` is the proxy's root (`http://127.0.0.1:8080`) or an OpenAI client's base URL
    (`…/v1`). Without `http_client`, it opens its own (closed by `close()` or `with`); a client
    passed in stays the caller's.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        backoff: Backoff | None = None,
        timeout_s: float = 30.0,
        http_client: httpx2.Client | None = None,
    ) -> None:
        self._url = _rewards_url(base_url)
        self._headers = {
            "authorization": f"Bearer {api_key}",
            "content-type": "application/json",
        }
        self._backoff = backoff or Backoff()
        self._timeout = httpx2.Timeout(timeout_s)
        self._owns_client = http_client is None
        self._client = http_client or httpx2.Client()

    def for_trajectory(
        self,
        trajectory_id: str,
        name: str,
        value: float,
        *,
        terminal: bool = False,
        reward_id: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Recorded:
        """Rewards the whole trajectory."""
        reward = _reward(trajectory_id, None, name, value, terminal, reward_id, tags)
        return self.send([reward])[0]

    def for_step(
        self,
        trajectory_id: str,
        step_id: str,
        name: str,
        value: float,
        *,
        terminal: bool = False,
        reward_id: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Recorded:
        """Rewards one step of the trajectory."""
        reward = _reward(trajectory_id, step_id, name, value, terminal, reward_id, tags)
        return self.send([reward])[0]

    def send(self, rewards: Iterable[Reward]) -> list[Recorded]:
        """Sends a batch (1 to 10,000 rewards) in one request: all are recorded, or none is
        and the refusal is raised."""
        body = _request_body(rewards)
        retry = 0
        while True:
            try:
                return _recorded(self._post(body))
            except AtdpError as error:
                wait = _wait_before_retry(self._backoff, error, retry)
                if wait is None:
                    raise
                time.sleep(wait)
                retry += 1

    def _post(self, body: bytes) -> httpx2.Response:
        try:
            return self._client.post(
                self._url, content=body, headers=self._headers, timeout=self._timeout
            )
        except httpx2.TransportError as error:
            raise _unreachable(error) from error

    def close(self) -> None:
        """Closes the HTTP client this object opened (not one passed in)."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Rewards:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncRewards:
    """`Rewards` for asyncio code: the same methods, awaited."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        backoff: Backoff | None = None,
        timeout_s: float = 30.0,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        self._url = _rewards_url(base_url)
        self._headers = {
            "authorization": f"Bearer {api_key}",
            "content-type": "application/json",
        }
        self._backoff = backoff or Backoff()
        self._timeout = httpx2.Timeout(timeout_s)
        self._owns_client = http_client is None
        self._client = http_client or httpx2.AsyncClient()

    async def for_trajectory(
        self,
        trajectory_id: str,
        name: str,
        value: float,
        *,
        terminal: bool = False,
        reward_id: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Recorded:
        """Rewards the whole trajectory."""
        reward = _reward(trajectory_id, None, name, value, terminal, reward_id, tags)
        return (await self.send([reward]))[0]

    async def for_step(
        self,
        trajectory_id: str,
        step_id: str,
        name: str,
        value: float,
        *,
        terminal: bool = False,
        reward_id: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Recorded:
        """Rewards one step of the trajectory."""
        reward = _reward(trajectory_id, step_id, name, value, terminal, reward_id, tags)
        return (await self.send([reward]))[0]

    async def send(self, rewards: Iterable[Reward]) -> list[Recorded]:
        """Sends a batch in one request, as `Rewards.send`."""
        body = _request_body(rewards)
        retry = 0
        while True:
            try:
                return _recorded(await self._post(body))
            except AtdpError as error:
                wait = _wait_before_retry(self._backoff, error, retry)
                if wait is None:
                    raise
                await asyncio.sleep(wait)
                retry += 1

    async def _post(self, body: bytes) -> httpx2.Response:
        try:
            return await self._client.post(
                self._url, content=body, headers=self._headers, timeout=self._timeout
            )
        except httpx2.TransportError as error:
            raise _unreachable(error) from error

    async def aclose(self) -> None:
        """Closes the HTTP client this object opened (not one passed in)."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> AsyncRewards:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
