"""The proxy's refusals as exceptions, one class per family of its error codes.

The proxy answers every refusal with a status and a machine-readable `code` (docs/proxy.md §4).
The class is chosen by the status, so a code added to the proxy later still lands in the right
family; `.code` tells the members of a family apart.
"""

from __future__ import annotations

import json

import httpx2


class AtdpError(Exception):
    """A request the proxy refused or could not be reached for.

    `status` is the HTTP status (None when no answer came), `code` the proxy's reason
    (`invalid_api_key`, `recording_unavailable`, …; None when the answer was not the proxy's
    JSON error, say from a load balancer in front of it), `message` what to do about it.
    """

    def __init__(self, status: int | None, code: str | None, message: str) -> None:
        super().__init__(f"{status} {code}: {message}" if status is not None else message)
        self.status = status
        self.code = code
        self.message = message


class AuthenticationError(AtdpError):
    """401: the key is missing (`missing_api_key`), unknown (`invalid_api_key`) or revoked
    (`api_key_revoked`)."""


class PolicyDeniedError(AtdpError):
    """403 `policy_denied`: Cedar does not let this key do it; the message names the policies."""


class InvalidRequestError(AtdpError):
    """Another 4xx: the request itself is wrong (`invalid_reward`, `invalid_json`,
    `request_too_large`, `unknown_path`, …). Sending it again does not help."""


class RateLimitedError(AtdpError):
    """429 (`rate_limit_exceeded`, `too_many_in_flight`): retry after `retry_after` seconds."""

    def __init__(
        self, status: int, code: str | None, message: str, retry_after: float | None
    ) -> None:
        super().__init__(status, code, message)
        self.retry_after = retry_after


class UnavailableError(AtdpError):
    """503 (`recording_unavailable`, `shutting_down`, `audit_unavailable`): the proxy cannot
    take the request now; `retry_after` is the wait it asked for, in seconds."""

    def __init__(
        self, status: int, code: str | None, message: str, retry_after: float | None
    ) -> None:
        super().__init__(status, code, message)
        self.retry_after = retry_after


class ServerError(AtdpError):
    """Another 5xx (`internal_error`, `upstream_failed`, …): a failure on the proxy's side."""


class UnreachableError(AtdpError):
    """No answer: the connection failed, broke or timed out (`status` and `code` are None)."""


def retry_after(response: httpx2.Response) -> float | None:
    """The `Retry-After` of a response in seconds, when it is a number (the proxy sends whole
    seconds; an HTTP date, which it never sends, reads as absent)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def from_response(response: httpx2.Response) -> AtdpError:
    """The exception for a non-2xx answer of the proxy, from its status and JSON error body.

    The body is `{"error": {"message", "type", "param", "code"}}` (OpenAI's format, which the
    proxy uses on every path but `/v1/messages`); a body that is not, keeps the status and
    says so, without quoting it.
    """
    status = response.status_code
    code: str | None = None
    message = f"the proxy answered {status} without an atdp error body"
    try:
        error = json.loads(response.content).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict):
        code = error.get("code") if isinstance(error.get("code"), str) else None
        if isinstance(error.get("message"), str):
            message = error["message"]
    if status == 401:
        return AuthenticationError(status, code, message)
    if status == 403:
        return PolicyDeniedError(status, code, message)
    if status == 429:
        return RateLimitedError(status, code, message, retry_after(response))
    if status == 503:
        return UnavailableError(status, code, message, retry_after(response))
    if 400 <= status < 500:
        return InvalidRequestError(status, code, message)
    return ServerError(status, code, message)
