"""Run a command in a pod's container over the exec WebSocket (pods/exec), on the one client (kubetrain.kube.rest).

The connection is the REST client's: the same server, the same `ssl.SSLContext` (the client key loaded in
memory, never written to a file), the same Authorization source (exec plugins re-run when their token
expires) and the same retry rule (kubetrain.kube.retry) for a handshake the server refused with 429/5xx or
a connection dropped before the command started. The socket is opened by kubetrain.kube.transport;
websocket-client (the library the kubernetes package's own `stream()` uses for this, pure Python) does the
RFC 6455 handshake and framing on it. The kubernetes package is not needed: its `stream()` would need its
ApiClient, a second client with its own urllib3 pool and retries, and the key in a temp file.

The channel protocol (v4.channel.k8s.io): every binary frame starts with a channel byte, 1 stdout,
2 stderr, 3 the exec's final Status (JSON; `details.causes` holds the exit code of a failed command).
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from kubetrain.errors import ClusterError
from kubetrain.kube.errors import ApiError, TimedOut, network_error
from kubetrain.kube.rest import CONNECT_TIMEOUT, USER_AGENT, Rest, path_of
from kubetrain.kube.retry import delay_for

if TYPE_CHECKING:
    from websocket import WebSocket

PROTOCOL = "v4.channel.k8s.io"  # every API server since 1.4; the Status channel carries the exit code
STDOUT, STDERR, STATUS = 1, 2, 3


@dataclass(frozen=True)
class ExecOutput:
    """What the command wrote, the exec's Status (JSON text, "" when none came) and whether it ended in time."""

    stdout: str
    stderr: str
    status: str
    finished: bool


def exec_in_pod(rest: Rest, namespace: str, pod: str, container: str, command: list[str], timeout: float,
                sleep: Callable[[float], None] | None = None) -> ExecOutput:
    """Run `command` in the container; waits at most `timeout` seconds for it to end.

    Raises ApiError (Forbidden without pods/exec, NotFound for a pod that is gone...) when the server refuses
    the exec, Unreachable when it cannot be reached."""
    query = [("container", container), ("stdout", "true"), ("stderr", "true"), ("stdin", "false"),
             ("tty", "false"), *(("command", part) for part in command)]
    target = path_of("", "v1", "pods", namespace, pod, "exec") + "?" + urlencode(query)
    ws = open_websocket(rest, target, sleep or rest.sleep)
    try:
        return _read(ws, timeout)
    finally:
        ws.close(timeout=1.0)  # after the server's close frame at once; else waits at most 1 s for it


def open_websocket(rest: Rest, target: str, sleep: Callable[[float], None], what: str = "exec") -> WebSocket:
    """The upgraded connection to `target` (a pods/exec or pods/portforward path), speaking PROTOCOL; a refusal
    the retry rule calls transient is tried again (nothing has run: the server answers the handshake before it
    starts the command or dials the port). `what` names the stream in messages."""
    attempt = 1
    while True:
        try:
            return _handshake(rest, target, what)
        except ApiError as error:
            delay = delay_for(attempt, rest.policy, status=error.status, body=error.body, headers=error.headers)
            if delay is None:
                raise
        except (OSError, http.client.HTTPException) as exc:
            delay = delay_for(attempt, rest.policy, exc=exc)
            if delay is None:
                raise network_error(exc, rest.server, rest.kubelet_timeout) from None
        sleep(delay)
        attempt += 1


def _handshake(rest: Rest, target: str, what: str) -> WebSocket:
    import websocket  # websocket-client only when an exec or a port-forward runs (import budget)

    pool = rest.pool
    host = f"[{pool.host}]" if ":" in pool.host else pool.host
    scheme = "wss" if pool.context is not None else "ws"
    headers = {"User-Agent": USER_AGENT}
    if (authorization := rest.authorization()) is not None:
        headers["Authorization"] = authorization
    sock = pool.open_socket(min(CONNECT_TIMEOUT, rest.request_timeout))
    # The API server answers the upgrade only once the kubelet has: a stopped kubelet never does.
    sock.settimeout(rest.kubelet_timeout)
    # enable_multithread: a port-forward sends from one thread while another receives.
    ws = websocket.WebSocket(skip_utf8_validation=True, enable_multithread=True)
    try:
        ws.connect(f"{scheme}://{host}:{pool.port}{pool.prefix}{target}", socket=sock, header=headers,
                   subprotocols=[PROTOCOL], redirect_limit=0, timeout=rest.kubelet_timeout,
                   suppress_origin=True)
    except websocket.WebSocketBadStatusException as exc:
        raw = exc.resp_body
        body = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")
        raise ApiError.of(exc.status_code, str(exc.status_message or ""), body, exc.resp_headers) from None
    except websocket.WebSocketTimeoutException:
        sock.close()
        raise TimedOut(f"{rest.server} did not open the {what} WebSocket within {rest.kubelet_timeout:g}s (the "
                       "pod's kubelet did not answer)") from None
    except websocket.WebSocketException as exc:
        sock.close()
        raise ClusterError(f"{rest.server} did not open the {what} WebSocket ({PROTOCOL}): {exc}") from None
    except BaseException:
        sock.close()
        raise
    return ws


def _read(ws: WebSocket, timeout: float) -> ExecOutput:
    """The channels until the server closes the stream (the command ended) or `timeout` passes."""
    import websocket  # websocket-client only when an exec runs (import budget)

    channels: dict[int, list[bytes]] = {STDOUT: [], STDERR: [], STATUS: []}
    deadline = time.monotonic() + timeout
    finished = False
    while (left := deadline - time.monotonic()) > 0:
        ws.settimeout(left)
        try:
            opcode, data = ws.recv_data()
        except websocket.WebSocketTimeoutException:
            break
        except (websocket.WebSocketConnectionClosedException, ConnectionError):
            finished = True
            break
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            finished = True
            break
        frame = data.encode() if isinstance(data, str) else data
        if frame and frame[0] in channels:
            channels[frame[0]].append(frame[1:])
    text = {channel: b"".join(parts).decode("utf-8", "replace") for channel, parts in channels.items()}
    return ExecOutput(text[STDOUT], text[STDERR], text[STATUS], finished)
