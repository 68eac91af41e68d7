"""Turn kubernetes-client and urllib3 failures into one-line ClusterErrors that say how to fix them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError, MaxRetryError, NewConnectionError, SSLError

from kubetrain.errors import ClusterError

CRD_HINT = "install the Kubeflow training-operator (`kubetrain cluster create` for a local one; see docs/cluster.md)"


def as_dict(value: object) -> dict[str, Any]:
    """A CustomObjectsApi response (typed `object`) as the JSON dict it is."""
    if not isinstance(value, dict):
        raise ClusterError(f"unexpected API response: {type(value).__name__}, not a JSON object")
    return value


def status_body(exc: ApiException) -> dict[str, Any]:
    """The Kubernetes Status object of an API error ({} when the body is not one)."""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def api_message(exc: ApiException) -> str:
    body = status_body(exc)
    return str(body.get("message") or exc.reason or f"HTTP {exc.status}")


def translate(exc: BaseException, action: str, server: str | None = None) -> ClusterError:
    """`action` says what we were doing, e.g. "create pytorchjobs.kubeflow.org in namespace ml"."""
    if isinstance(exc, ApiException) and not exc.status:  # the REST layer's wrapping of an SSLError
        reason = " ".join(str(exc.reason or "").split())[:200]
        return ClusterError(f"TLS error talking to {server or 'the API server'}: {reason} "
                            "(check the kubeconfig's certificate-authority and server address)")
    if isinstance(exc, ApiException):
        return _from_api(exc, action)
    if isinstance(exc, ConfigException):
        return ClusterError(f"kubeconfig: {exc}; set KUBECONFIG, --kubeconfig or --context")
    if isinstance(exc, MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    where = server or "the API server"
    if isinstance(exc, SSLError):
        return ClusterError(f"TLS error talking to {where}: {_short(exc)} "
                            "(check the kubeconfig's certificate-authority and server address)")
    if isinstance(exc, NewConnectionError | ConnectionRefusedError):
        return ClusterError(f"cannot reach {where}: is the cluster running? (kubectl cluster-info)")
    return ClusterError(f"cannot reach {where} ({_short(exc)}): is the cluster running? (kubectl cluster-info)")


def _from_api(exc: ApiException, action: str) -> ClusterError:
    status = exc.status or 0
    body = status_body(exc)
    message = api_message(exc)
    if status == 401:
        return ClusterError("credentials rejected (401 Unauthorized): they have expired or are invalid; "
                            "re-login / refresh the kubeconfig (e.g. `gcloud container clusters get-credentials`, "
                            "`aws eks update-kubeconfig`, `az aks get-credentials`)")
    if status == 403 and "admission webhook" in message:
        return ClusterError(f"invalid: {message}")
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
    if status == 429 or status >= 500:
        return ClusterError(f"the API server kept failing ({status} {exc.reason}) while trying to {action}; "
                            "retried with backoff, try again later")
    return ClusterError(f"cannot {action}: {status} {message}")


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
    except (ApiException, ConfigException, HTTPError, OSError) as exc:
        raise translate(exc, action, server) from None
