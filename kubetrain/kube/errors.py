"""The one client's error vocabulary, and one-line ClusterErrors that say how to fix them.

An HTTP error status from the API server is an ApiError subclass named for it (NotFound, Conflict,
Forbidden...): callers catch the one they expect. A request that got no HTTP answer raises OSError or one of
http.client's errors (kubetrain.kube.transport); `translate` and `cluster_errors` turn both into a line.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from kubetrain.errors import ClusterError

CRD_HINT = "install the Kubeflow training-operator (`kubetrain cluster create` for a local one; see docs/cluster.md)"


class Unreachable(ClusterError):
    """The API server could not be reached or did not answer in time (exit 3, as opposed to 1 for a job
    that failed or a request the server refused)."""

    exit_code = 3


class TimedOut(Unreachable):
    """The server took the request but did not answer within the read timeout (for a log read or an exec,
    usually the node's kubelet: the API server waits for it)."""


class AuthPluginError(ClusterError):
    """A kubeconfig exec / auth-provider plugin (gcloud, aws, kubelogin...) failed: no credentials."""

    exit_code = 3


class ApiError(Exception):
    """An HTTP error status from the API server: status, reason, body (the server's Status, as text),
    headers. Raised as the subclass for its status (`ApiError.of`)."""

    def __init__(self, status: int, reason: str, body: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{status} {reason}")
        self.status, self.reason, self.body, self.headers = status, reason, body, dict(headers or {})

    @classmethod
    def of(cls, status: int, reason: str, body: str, headers: Mapping[str, str] | None = None) -> ApiError:
        """The ApiError subclass for `status` (NotFound for 404, Conflict for 409...)."""
        kind = BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
        return kind(status, reason, body, headers)

    @classmethod
    def from_response(cls, response: Any) -> ApiError:
        data = response.data if hasattr(response, "data") else b""
        return cls.of(int(response.status), str(getattr(response, "reason", "") or ""),
                      (data or b"").decode("utf-8", "replace"), dict(response.headers or {}))

    @property
    def status_object(self) -> dict[str, Any]:
        """The server's Status object ({} when the body is not one): reason, message, details."""
        return status_body(self)


class BadRequest(ApiError):
    """400: a malformed request (for a pod's logs: the container has not started, or is not named)."""


class Unauthorized(ApiError):
    """401: no or expired credentials."""


class Forbidden(ApiError):
    """403: RBAC (or an admission webhook) refused."""


class NotFound(ApiError):
    """404: the object, or the whole resource (a CRD not installed: then the body is no Status naming it)."""


class Conflict(ApiError):
    """409: AlreadyExists, or a stale resourceVersion."""


class Gone(ApiError):
    """410: a watch's resourceVersion is too old (Expired)."""


class TooLarge(ApiError):
    """413: the request body is larger than the server takes."""


class Invalid(ApiError):
    """422: the server's validation rejected the object."""


class TooManyRequests(ApiError):
    """429: API priority and fairness (or a rate limit) turned the request away."""


class ServerError(ApiError):
    """5xx: the server (or a webhook it called) failed."""


class InternalError(ServerError):
    """500: e.g. a failing admission webhook, or a patch the server could not apply."""


BY_STATUS: dict[int, type[ApiError]] = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound,
                                         409: Conflict, 410: Gone, 413: TooLarge, 422: Invalid,
                                         429: TooManyRequests, 500: InternalError}


def as_dict(value: object) -> dict[str, Any]:
    """A CustomObjectsApi response (typed `object`) as the JSON dict it is."""
    if not isinstance(value, dict):
        raise ClusterError(f"unexpected API response: {type(value).__name__}, not a JSON object")
    return value


def status_body(exc: ApiError) -> dict[str, Any]:
    """The Kubernetes Status object of an API error ({} when the body is not one)."""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def api_message(exc: ApiError) -> str:
    body = status_body(exc)
    return str(body.get("message") or exc.reason or f"HTTP {exc.status}")


def translate(exc: BaseException, action: str, server: str | None = None) -> ClusterError:
    """`action` says what we were doing, e.g. "create pytorchjobs.kubeflow.org in namespace ml"."""
    if isinstance(exc, ApiError):
        return _from_api(exc, action)
    return Unreachable(describe_network_error(exc, server))


NETWORK_ERRORS = (OSError, http.client.HTTPException)  # what a request that got no HTTP answer raises


def is_timeout(exc: BaseException) -> bool:
    """A read that timed out (socket.timeout is TimeoutError)."""
    return isinstance(exc, TimeoutError)


def describe_network_error(exc: BaseException, server: str | None, read_timeout: float | None = None) -> str:
    """One line for a request that got no HTTP answer: refused, timed out, TLS, DNS, reset."""
    where = server or "the API server"
    if isinstance(exc, ssl.SSLError):
        return (f"TLS error talking to {where}: {_short(exc)} "
                "(check the kubeconfig's certificate-authority and server address)")
    if isinstance(exc, socket.gaierror):
        return f"cannot reach {where}: its host name does not resolve (check the kubeconfig's server address)"
    # A connect timeout (transport.ConnectTimeout) means unreachable, not slow.
    if is_timeout(exc) and "connect" not in str(exc).lower():
        after = f" within {read_timeout:g}s" if read_timeout else ""
        return (f"{where} did not answer{after}: the API server is overloaded or hung "
                "(raise --request-timeout, or check it: kubectl get --raw /readyz)")
    if isinstance(exc, ConnectionRefusedError):
        return f"cannot reach {where}: is the cluster running? (kubectl cluster-info)"
    return f"cannot reach {where} ({_short(exc)}): is the cluster running? (kubectl cluster-info)"


def network_error(exc: BaseException, server: str | None, read_timeout: float | None = None) -> Unreachable:
    """describe_network_error's line as the error to raise: TimedOut for an answer that did not come."""
    message = describe_network_error(exc, server, read_timeout)
    timed_out = is_timeout(exc) and "connect" not in str(exc).lower()
    return TimedOut(message) if timed_out else Unreachable(message)


def _from_api(exc: ApiError, action: str) -> ClusterError:
    status = exc.status or 0
    body = status_body(exc)
    message = api_message(exc)
    if status == 401:
        return ClusterError("credentials rejected (401 Unauthorized): they have expired or are invalid; "
                            "re-login / refresh the kubeconfig (e.g. `gcloud container clusters get-credentials`, "
                            "`aws eks update-kubeconfig`, `az aks get-credentials`)")
    if status == 403 and "admission webhook" in message:
        return ClusterError(f"invalid: {message}")
    if status == 403 and "system:anonymous" in message:
        return ClusterError(f"the API server saw no credentials (request made as system:anonymous) while trying "
                            f"to {action}: the kubeconfig's user has no token or certificate, or its login "
                            "plugin gave none; log in again / refresh the kubeconfig")
    if status == 403:
        return ClusterError(f"forbidden: cannot {action}: {message} "
                            "(ask a cluster admin for an RBAC Role allowing it; check with `kubectl auth can-i`)")
    if status == 404:
        return _not_found(body, message, action)
    if status == 409:
        return ClusterError(f"conflict: cannot {action}: {message}")
    if status == 422:
        return ClusterError(f"invalid: {_invalid_detail(body, message)}")
    if status == 500 and "failed to create typed patch object" in message:
        return ClusterError(f"invalid: {message.split('): ', 1)[-1]}")
    if status == 500 and (webhook := _failing_webhook(message)):
        return ClusterError(f"admission webhook {webhook} failed, so the API server refused to {action}: "
                            f"{message} (the webhook's service is down or broken: kubetrain doctor, "
                            "or ask whoever runs the operator)")
    if status == 429 or status >= 500:  # overloaded or restarting: a cluster we could not use (exit 3)
        return Unreachable(f"the API server kept failing ({status} {exc.reason}) while trying to {action}; "
                            "retried with backoff, try again later")
    return ClusterError(f"cannot {action}: {status} {message}")


def _failing_webhook(message: str) -> str | None:
    """The webhook's name from an apiserver 500 such as 'Internal error occurred: failed calling webhook
    "validate.pytorchjob.kubeflow.org": failed to call webhook: Post "https://...": ...'."""
    found = re.search(r'failed calling webhook "([^"]+)"', message)
    return found.group(1) if found else None


def _not_found(body: dict[str, Any], message: str, action: str) -> ClusterError:
    details = body.get("details") or {}
    if details.get("kind") == "namespaces":
        name = details.get("name", "?")
        return ClusterError(f"namespace {name} does not exist: create it: kubectl create namespace {name}")
    if details.get("name"):
        return ClusterError(f"not found: {message}")
    # No Status naming an object: the API group/resource itself is not served, i.e. the CRD is missing.
    return ClusterError(f"cannot {action}: the cluster does not serve this API (CRD not installed): {CRD_HINT}")


def _invalid_detail(body: dict[str, Any], message: str) -> str:
    """'PyTorchJob "x" is invalid: spec.foo: Invalid value...' keeps every field the server named."""
    causes = (body.get("details") or {}).get("causes") or []
    # Drop the apiserver's "<nil>: some validation rules were not checked" footnote when real causes exist.
    causes = [c for c in causes if c.get("field") not in (None, "", "<nil>")] or causes
    if not causes:
        return message
    details = "; ".join(f"{c.get('field', '')}: {c.get('message', '')}".lstrip(": ") for c in causes)
    kind = (body.get("details") or {}).get("kind", "object")
    name = (body.get("details") or {}).get("name", "")
    return f"{kind} {name!r} rejected by the API server: {details}"


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


@contextmanager
def cluster_errors(action: str, server: str | None = None) -> Iterator[None]:
    """Inside, API and network errors become one-line ClusterErrors (never a traceback)."""
    try:
        yield
    except ClusterError:
        raise
    except Exception as exc:
        if not isinstance(exc, (ApiError, *NETWORK_ERRORS)):
            raise
        raise translate(exc, action, server) from None
