"""A small REST client for the hot paths (status, list, logs, watches): http.client with kubectl's manners.

Why not the kubernetes package's ApiClient: importing it costs 0.6–1.5 s (every generated model is
loaded), which alone is 3–5× the budget of a `kubetrain status`. Why not urllib3 either (which an
earlier client used): its import is ~95 ms of the 300 ms budget, while the standard library's
http.client and ssl are loaded anyway. kubetrain.kube.transport keeps connections alive (a thread-safe
pool), does TLS with client certificates and tls-server-name, and streams chunked responses. Every call of
the CLI, the Python API and the controller goes through it, and exec into a pod over WebSocket
rides a socket of its pool (kubetrain.kube.podexec). The kubernetes package stays, imported lazily, only for
the legacy auth-provider plugins (kubetrain.kube.auth).

Every request has a connect timeout and a read timeout (`--request-timeout`). 429/5xx answers and
connections reset mid-request are retried with backoff (kubetrain.kube.retry); a refused connection
or a server that does not answer in time is an `Unreachable` error at once (exit 3): the followers
(watch.stream, log streams) catch it and reconnect until their own deadline.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from kubetrain import __version__
from kubetrain.kube.errors import ApiError, Unreachable, network_error
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.retry import DEFAULT_POLICY, RetryPolicy, delay_for
from kubetrain.kube.transport import Pool, Response

USER_AGENT = f"kubetrain/{__version__}"
CONNECT_TIMEOUT = 10.0  # seconds; kubectl's dialer also gives up on a TCP connect after ~30 s, TLS after 10 s
REQUEST_TIMEOUT = 30.0  # default read timeout of one request (not of watches/log streams, which set theirs)
# Default deadline of what the API server proxies to a kubelet (a log read, an exec's handshake): a stopped or
# partitioned kubelet accepts the connection and never answers, and a node stays Ready for ~40 s after that.
KUBELET_TIMEOUT = 10.0
Auth = Callable[[], str | None]  # the Authorization header's value, re-evaluated per request (tokens rotate)


class Rest:
    """JSON over HTTPS to one API server. Thread-safe (the transport's pool is)."""

    def __init__(self, endpoint: Endpoint, auth: Auth | None = None, request_timeout: float | None = None,
                 policy: RetryPolicy = DEFAULT_POLICY, sleep: Callable[[float], None] = time.sleep) -> None:
        self.endpoint = endpoint
        self.server = endpoint.server
        self.request_timeout = request_timeout or REQUEST_TIMEOUT
        self.kubelet_timeout = request_timeout or KUBELET_TIMEOUT  # --request-timeout, else its own default
        self.policy, self.sleep = policy, sleep
        self._auth = auth or static_auth(endpoint)
        context = ssl_context(endpoint) if endpoint.server.startswith("https:") else None
        try:
            self.pool = Pool(endpoint.server, context, endpoint.tls_server_name, maxsize=32)
        except ValueError as exc:
            raise Unreachable(f"kubeconfig context {endpoint.context}: {exc}") from None

    def authorization(self) -> str | None:
        """The Authorization header value now (runs an exec plugin again when its token expired)."""
        return self._auth()

    def request(self, method: str, path: str, query: Mapping[str, Any] | None = None, body: Any = None, *,
                content_type: str = "application/json", stream: bool = False, read_timeout: float | None = -1,
                retry: bool = True) -> Response:
        """One request; raises ApiError for an HTTP error status, Unreachable when the server is not there.

        read_timeout -1: the client's --request-timeout; None: wait forever (a log stream may be quiet); a
        number: that many seconds (a kubelet's answer: `kubelet_timeout`)."""
        target = path + (("?" + urlencode(_query(query))) if query else "")
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json, */*"}
        if body is not None:
            headers["Content-Type"] = content_type
        if (authorization := self._auth()) is not None:
            headers["Authorization"] = authorization
        data = _encode(body)
        # --request-timeout bounds the connect (TCP + TLS handshake) too, as kubectl's does.
        connect = min(CONNECT_TIMEOUT, self.request_timeout)
        read = self.request_timeout if read_timeout == -1 else read_timeout
        attempt = 1
        while True:
            try:
                response = self.pool.request(method, target, data, headers, connect_timeout=connect,
                                             read_timeout=read, preload=not stream)
            except (OSError, http.client.HTTPException) as exc:
                delay = delay_for(attempt, self.policy, exc=exc) if retry else None
                if delay is None:
                    raise network_error(exc, self.server, read) from None
            else:
                if response.status < 400:
                    return response
                error = ApiError.from_response(response)
                delay = delay_for(attempt, self.policy, status=error.status, body=error.body,
                                  headers=error.headers) if retry else None
                if delay is None:
                    raise error
            self.sleep(delay)
            attempt += 1

    def json(self, method: str, path: str, query: Mapping[str, Any] | None = None, body: Any = None,
             content_type: str = "application/json") -> dict[str, Any]:
        response = self.request(method, path, query, body, content_type=content_type)
        try:
            value = orjson.loads(response.data or b"{}")  # a 1,000-job list is 5 MB: 4-5x json's speed
        except ValueError:
            raise Unreachable(f"{self.server} answered {path} with something that is not JSON: is it an "
                              "API server? (check the kubeconfig's server address)") from None
        return value if isinstance(value, dict) else {}

    def get(self, path: str, **query: Any) -> dict[str, Any]:
        return self.json("GET", path, query or None)


def _encode(body: Any) -> bytes | None:
    if body is None or isinstance(body, bytes):
        return body
    return (body if isinstance(body, str) else json.dumps(body)).encode()


def _query(query: Mapping[str, Any]) -> list[tuple[str, str]]:
    out = []
    for name, value in query.items():
        if value is None:
            continue
        out.append((name, ("true" if value else "false") if isinstance(value, bool) else str(value)))
    return out


def path_of(group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None,
            sub: str | None = None) -> str:
    """/api/v1/namespaces/ns/pods/x/log, /apis/kubeflow.org/v1/pytorchjobs, ... (core group: '')."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    parts = [base]
    if namespace:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(plural)
    if name:
        parts.append(quote(name, safe=""))
    if sub:
        parts.append(sub)
    return "/".join(parts)


def static_auth(endpoint: Endpoint) -> Auth:
    """Bearer token (inline, or tokenFile re-read on every request, as it rotates), or basic auth."""
    if endpoint.token_file:
        def from_file() -> str | None:
            try:
                with open(endpoint.token_file or "", encoding="utf-8") as handle:
                    return f"Bearer {handle.read().strip()}"
            except OSError as exc:
                raise Unreachable(f"kubeconfig tokenFile {endpoint.token_file}: {exc.strerror}") from None
        return from_file
    if endpoint.token:
        value = f"Bearer {endpoint.token}"
        return lambda: value
    if endpoint.username and endpoint.password is not None:
        basic = "Basic " + base64.b64encode(f"{endpoint.username}:{endpoint.password}".encode()).decode()
        return lambda: basic
    return lambda: None


def ssl_context(endpoint: Endpoint) -> ssl.SSLContext:
    """The kubeconfig's CA (else the system's) and client certificate. ssl can load a certificate only from
    a file, so inline data goes through an in-memory file (Linux memfd), else a private temp file that is
    removed at once."""
    try:
        if endpoint.insecure:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif endpoint.ca_data:
            context = ssl.create_default_context(cadata=endpoint.ca_data.decode("ascii", "replace"))
        else:
            context = ssl.create_default_context(cafile=endpoint.ca_file)
        if endpoint.cert_data or endpoint.cert_file:
            _load_client_cert(context, endpoint)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise Unreachable(f"kubeconfig context {endpoint.context}: unusable TLS material: {exc}") from None
    return context


def _load_client_cert(context: ssl.SSLContext, endpoint: Endpoint) -> None:
    if endpoint.cert_file and not endpoint.cert_data and (endpoint.key_file and not endpoint.key_data):
        context.load_cert_chain(endpoint.cert_file, endpoint.key_file)
        return
    cert = endpoint.cert_data or _read_bytes(endpoint.cert_file)
    key = endpoint.key_data or _read_bytes(endpoint.key_file)
    if hasattr(os, "memfd_create"):  # Linux: an anonymous in-memory file, so the key never touches a disk
        fd = os.memfd_create("kubetrain-client-cert", os.MFD_CLOEXEC)
        try:
            with os.fdopen(os.dup(fd), "wb") as handle:
                handle.write(cert + b"\n" + key)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    import tempfile  # only without memfd_create; it loads random and shutil (`status` import budget)

    fd, name = tempfile.mkstemp(prefix="kubetrain-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(cert + b"\n" + key)
        context.load_cert_chain(name)
    finally:
        os.unlink(name)


def _read_bytes(path: str | None) -> bytes:
    if not path:
        return b""
    with open(path, "rb") as handle:
        return handle.read()

