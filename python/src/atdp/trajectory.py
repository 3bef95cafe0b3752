"""One trajectory of model calls through the proxy, from an official SDK client.

The proxy groups calls into trajectories by the request headers `x-atdp-trajectory-id` (a
name the agent chooses) or `x-atdp-session-id` (a key for which the proxy chooses the
trajectory), and answers every call that reached the upstream with `x-atdp-step-id` and
`x-atdp-trajectory-id` (docs/proxy.md §5). `trajectory()` derives from the agent's `openai`
or `anthropic` client one that sends the header on every call and notes the ids of each reply.
"""

from __future__ import annotations

import threading
import uuid
from types import TracebackType
from typing import Any, Generic, TypeVar

import httpx2

TRAJECTORY_HEADER = "x-atdp-trajectory-id"
SESSION_HEADER = "x-atdp-session-id"
STEP_HEADER = "x-atdp-step-id"

ClientT = TypeVar("ClientT")


def _check_id(what: str, value: str) -> str:
    """The proxy's rule for a trajectory or session header: 1 to 200 visible ASCII characters
    (it answers 400 `invalid_header` otherwise; checking here fails before any call)."""
    if not 1 <= len(value) <= 200 or not all("!" <= c <= "~" for c in value):
        raise ValueError(f"{what} must be 1 to 200 visible ASCII characters (no spaces)")
    return value


class _Replies:
    """The ids of the replies seen so far, in the order their headers arrived; appended to
    from every thread or task that calls through the trajectory's client."""

    def __init__(self, trajectory_id: str | None) -> None:
        self._lock = threading.Lock()
        self.trajectory_id = trajectory_id
        self._step_ids: list[str] = []

    def step_ids(self) -> list[str]:
        with self._lock:
            return list(self._step_ids)

    def note(self, headers: httpx2.Headers) -> None:
        step_id = headers.get(STEP_HEADER)
        if step_id is None:
            return  # a refusal by the proxy itself: no step was made
        with self._lock:
            self._step_ids.append(step_id)
            self.trajectory_id = headers.get(TRAJECTORY_HEADER, self.trajectory_id)


class _Relay(httpx2.BaseTransport):
    """The transport of the derived client: sends each request through the agent's own HTTP
    client (its connection pool, proxies, TLS settings and hooks) and notes the reply's ids as
    soon as its header arrives, before a streamed body is read."""

    def __init__(self, inner: httpx2.Client, replies: _Replies) -> None:
        self._inner = inner
        self._replies = replies

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self._inner.send(request, stream=True)
        self._replies.note(response.headers)
        return response

    def close(self) -> None:
        """Nothing: the agent's HTTP client stays the agent's to close."""


class _AsyncRelay(httpx2.AsyncBaseTransport):
    """`_Relay` for the SDKs' async clients."""

    def __init__(self, inner: httpx2.AsyncClient, replies: _Replies) -> None:
        self._inner = inner
        self._replies = replies

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.send(request, stream=True)
        self._replies.note(response.headers)
        return response

    async def aclose(self) -> None:
        """Nothing: the agent's HTTP client stays the agent's to close."""


def _derive(client: Any, headers: dict[str, str], replies: _Replies) -> Any:
    """A copy of the SDK client that sends `headers` and relays through `_Relay`.

    Both SDKs keep their HTTP client in `_client` and take a replacement in `with_options`;
    the derived HTTP client copies the settings that `build_request` applies (default headers,
    cookies, timeout), while the agent's client applies its own when it sends.
    """
    inner = getattr(client, "_client", None)
    if inner is None or not callable(getattr(client, "with_options", None)):
        raise TypeError(
            "atdp.trajectory takes an openai or anthropic client "
            "(OpenAI, AsyncOpenAI, Anthropic, AsyncAnthropic)"
        )
    if not isinstance(inner, (httpx2.Client, httpx2.AsyncClient)):
        raise TypeError(
            f"atdp.trajectory needs an SDK client built on httpx2, not on {type(inner).__module__}"
        )
    settings: dict[str, Any] = {
        "headers": inner.headers,
        "cookies": inner.cookies,
        "timeout": inner.timeout,
        "trust_env": False,  # the agent's client already applies the environment's proxies
    }
    relayed: httpx2.Client | httpx2.AsyncClient
    if isinstance(inner, httpx2.AsyncClient):
        relayed = httpx2.AsyncClient(transport=_AsyncRelay(inner, replies), **settings)
    else:
        relayed = httpx2.Client(transport=_Relay(inner, replies), **settings)
    return client.with_options(default_headers=headers, http_client=relayed)


class Trajectory(Generic[ClientT]):
    """A trajectory: `client` is the agent's SDK client, derived to join it on every call.

    Use it as a context manager, `with` or `async with`; the block marks the trajectory's extent
    in the agent's code, and `client` is usable in it (and after it, still joining the same
    trajectory). `step_ids` lists the `x-atdp-step-id` of every reply that came from the
    upstream, in the order their headers arrived (concurrent calls in the order they were
    answered; an upstream's error reply is a step too, and so is each retry the SDK made).
    """

    def __init__(
        self, client: ClientT, *, trajectory_id: str | None = None, session: str | None = None
    ) -> None:
        if trajectory_id is not None and session is not None:
            raise ValueError(
                "give trajectory_id or session, not both: "
                "the proxy ignores the session of a named trajectory"
            )
        if session is not None:
            headers = {SESSION_HEADER: _check_id("session", session)}
            self._replies = _Replies(None)
        else:
            named = (
                _check_id("trajectory_id", trajectory_id)
                if trajectory_id is not None
                else str(uuid.uuid4())
            )
            headers = {TRAJECTORY_HEADER: named}
            self._replies = _Replies(named)
        self.client: ClientT = _derive(client, headers, self._replies)

    @property
    def trajectory_id(self) -> str:
        """The trajectory's id: the one named or generated, or with a session the one the
        proxy chose, as its latest reply said. With a session and no reply yet, LookupError."""
        trajectory_id = self._replies.trajectory_id
        if trajectory_id is None:
            raise LookupError(
                "the proxy names a session's trajectory in its first reply; none has come yet"
            )
        return trajectory_id

    @property
    def step_ids(self) -> list[str]:
        """The step ids of the replies so far, in order (a copy)."""
        return self._replies.step_ids()

    def __enter__(self) -> Trajectory[ClientT]:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    async def __aenter__(self) -> Trajectory[ClientT]:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None


def trajectory(
    client: ClientT, *, trajectory_id: str | None = None, session: str | None = None
) -> Trajectory[ClientT]:
    """A trajectory of calls through `client` (`OpenAI`, `AsyncOpenAI`, `Anthropic` or
    `AsyncAnthropic`).

    With `trajectory_id`, the calls join that trajectory; with `session`, the proxy keeps one
    trajectory per session key and tenant and names it in its replies; with neither, a new
    trajectory with a UUID4 id. `client` itself is not changed.
    """
    return Trajectory(client, trajectory_id=trajectory_id, session=session)
