"""Retry API calls with exponential backoff on 429, 5xx and dropped connections, honouring Retry-After.

One rule (`delay_for`) for the one client: its requests (kubetrain.kube.rest) and its exec WebSocket
handshakes (kubetrain.kube.podexec).

Connection *refused* is not retried here (the cluster is down and a one-shot command should say so at
once); followers (kubetrain.kube.watch) retry it until their own deadline. A reset or a response
dropped mid-request is retried.
"""

from __future__ import annotations

import http.client
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

NOT_RETRIED_5XX = {501, 505}  # Not Implemented / HTTP Version Not Supported never get better


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # total tries, including the first
    base: float = 0.2  # first backoff, seconds
    factor: float = 2.0
    cap: float = 10.0  # no single wait is longer (Retry-After included)
    jitter: float = 0.2  # +-20 %, so many clients don't retry in lockstep


DEFAULT_POLICY = RetryPolicy()


def retryable_status(status: int | None) -> bool:
    return status == 429 or (status is not None and 500 <= status <= 599 and status not in NOT_RETRIED_5XX)


def is_connection_reset(exc: BaseException) -> bool:
    """A connection that dropped mid-request (reset, closed without a response, a body cut short)."""
    return isinstance(exc, ConnectionResetError | ConnectionAbortedError | BrokenPipeError |
                      http.client.RemoteDisconnected | http.client.IncompleteRead)


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), or None."""
    value = (headers or {}).get("Retry-After") or (headers or {}).get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def backoff(attempt: int, policy: RetryPolicy = DEFAULT_POLICY, after: float | None = None,
            rand: Callable[[], float] = random.random) -> float:
    """Wait before retry number `attempt` (1-based): exponential with jitter, at least Retry-After, capped."""
    delay = policy.base * policy.factor ** (attempt - 1)
    delay *= 1 + policy.jitter * (2 * rand() - 1)
    if after is not None:
        delay = max(delay, after)
    return min(delay, policy.cap)


def permanent_500(status: int | None, body: bytes | str | None) -> bool:
    """A 500 that is the request's fault: server-side apply of a value of the wrong type answers
    500 "failed to create typed patch object"; sending it again cannot help."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else (body or "")
    return status == 500 and "failed to create typed patch object" in text


def delay_for(attempt: int, policy: RetryPolicy = DEFAULT_POLICY, *, exc: BaseException | None = None,
              status: int | None = None, body: bytes | str | None = None,
              headers: Mapping[str, str] | None = None) -> float | None:
    """Seconds to wait before try `attempt + 1`, or None when the failure is final: the one retry rule
    (kubetrain.kube.rest's requests, kubetrain.kube.podexec's handshakes)."""
    if attempt >= policy.attempts:
        return None
    if exc is not None:
        return backoff(attempt, policy) if is_connection_reset(exc) else None
    if retryable_status(status) and not permanent_500(status, body):
        return backoff(attempt, policy, retry_after(headers))
    return None

