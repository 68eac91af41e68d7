"""Forward local TCP connections to a pod's port over the port-forward WebSocket (pods/portforward), on the one
client: the same handshake, TLS context, credentials and retry rule as exec (kubetrain.kube.podexec).

The protocol is the kubelet's WebSocket port-forward (v4.channel.k8s.io): for the one port asked (`ports=N`),
channel 0 carries the data both ways and channel 1 the kubelet's error text; every frame starts with its
channel byte, and the server's first frame on each channel is the port number, 2 bytes little-endian (not
data). A WebSocket forwards one connection (it has no stream multiplexing, unlike SPDY), so every accepted
local connection opens its own; the server closes it when the pod's side of the connection ends.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from kubetrain.errors import ClusterError, KubetrainError
from kubetrain.kube.errors import cluster_errors
from kubetrain.kube.objects import status_of
from kubetrain.kube.podexec import open_websocket
from kubetrain.kube.rest import Rest, path_of

if TYPE_CHECKING:
    from websocket import WebSocket

DATA, ERROR = 0, 1
HEADER = 2  # bytes of the port number that opens each channel
CHUNK = 65536


class ForwardError(ClusterError):
    """The kubelet could not reach the pod's port (its text from the error channel)."""


@dataclass
class Channels:
    """Splits the server's frames of one forwarded port into data and error text, dropping each channel's
    port header (and checking it names the port asked for)."""

    port: int
    _header: dict[int, bytes] = field(default_factory=lambda: {DATA: b"", ERROR: b""})

    def split(self, frame: bytes) -> tuple[int, bytes]:
        """(channel, payload) of one frame; the payload is b"" for a header or an unknown channel."""
        if not frame or frame[0] not in self._header:
            return -1, b""
        channel, payload = frame[0], frame[1:]
        need = HEADER - len(self._header[channel])
        if need > 0:
            self._header[channel] += payload[:need]
            payload = payload[need:]
            if len(self._header[channel]) == HEADER and (port := struct.unpack("<H", self._header[channel])[0]) \
                    != self.port:
                raise ClusterError(f"the server forwards port {port}, not {self.port}")
        return channel, payload


def data_frame(payload: bytes) -> bytes:
    """A frame of data for the pod's port."""
    return bytes([DATA]) + payload


def forward_path(namespace: str, pod: str, port: int) -> str:
    return path_of("", "v1", "pods", namespace, pod, "portforward") + "?" + urlencode({"ports": port})


class Forwarder:
    """A listener on host:local_port (0: any free port) whose every connection reaches pod:remote_port.

    `report` gets one line per connection that failed (the kubelet's error, a refused handshake)."""

    def __init__(self, rest: Rest, namespace: str, pod: str, remote_port: int, *, host: str = "127.0.0.1",
                 local_port: int = 0, report: Callable[[str], None] = lambda line: None) -> None:
        self.rest, self.namespace, self.pod, self.remote_port = rest, namespace, pod, remote_port
        self.report = report
        self.target = forward_path(namespace, pod, remote_port)
        try:
            self.listener = socket.create_server((host, local_port))
        except OSError as exc:
            raise ClusterError(f"cannot listen on {host}:{local_port}: {exc.strerror or exc}") from None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.listener.getsockname()[:2]
        return str(host), int(port)

    def check(self) -> None:
        """Fails with one clear error unless the pod runs and this user may forward to it (a handshake that
        forwards nothing)."""
        with cluster_errors(f"get pod {self.pod} in namespace {self.namespace}", self.rest.server):
            pod = self.rest.get(path_of("", "v1", "pods", self.namespace, self.pod))
        phase = status_of(pod).get("phase")
        if phase != "Running":
            raise ClusterError(f"pod {self.namespace}/{self.pod} is not running (phase {phase or 'unknown'})")
        _drop(self._open())

    def _open(self) -> WebSocket:
        with cluster_errors(f"port-forward to pod {self.pod} in namespace {self.namespace}", self.rest.server):
            return open_websocket(self.rest, self.target, self.rest.sleep, "port-forward")

    def serve_forever(self) -> None:
        """Accepts connections until close() (or Ctrl-C in the thread that calls this)."""
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()

    def _forward(self, client: socket.socket) -> None:
        try:
            ws = self._open()
        except KubetrainError as error:
            self.report(f"{self.namespace}/{self.pod}:{self.remote_port}: {error}")
            client.close()
            return
        ws.settimeout(None)  # a forwarded connection may idle as long as its ends like
        threading.Thread(target=_local_to_pod, args=(client, ws), daemon=True).start()
        try:
            self._pod_to_local(ws, client)
        except KubetrainError as error:
            self.report(f"{self.namespace}/{self.pod}:{self.remote_port}: {error}")
        finally:
            _drop(ws)
            _hang_up(client)

    def _pod_to_local(self, ws: WebSocket, client: socket.socket) -> None:
        import websocket

        channels = Channels(self.remote_port)
        errors: list[bytes] = []
        while True:
            try:
                opcode, data = ws.recv_data()
            except (websocket.WebSocketException, OSError):
                break
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                break
            channel, payload = channels.split(data.encode() if isinstance(data, str) else data)
            if channel == DATA and payload:
                try:
                    client.sendall(payload)
                except OSError:
                    break
            elif channel == ERROR and payload:
                errors.append(payload)
        if errors:
            raise ForwardError(b"".join(errors).decode("utf-8", "replace").strip())


def _local_to_pod(client: socket.socket, ws: WebSocket) -> None:
    """The client's bytes to the pod until it closes; then the WebSocket ends (HTTP clients do not half-close
    while they wait for an answer, and the protocol has no half-close to pass on)."""
    import websocket

    while True:
        try:
            data = client.recv(CHUNK)
        except OSError:
            break
        if not data:
            break
        try:
            ws.send(data_frame(data), opcode=websocket.ABNF.OPCODE_BINARY)
        except (websocket.WebSocketException, OSError):
            break
    _wake(ws)


def _wake(ws: WebSocket) -> None:
    """Shuts the WebSocket's socket down, waking the thread blocked receiving on it (close() would not)."""
    sock = ws.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # the other thread closed it first
            sock.shutdown(socket.SHUT_RDWR)


def _drop(ws: WebSocket) -> None:
    """Ends the WebSocket at once (no close handshake: the other side may be gone)."""
    _wake(ws)
    ws.shutdown()


def _hang_up(client: socket.socket) -> None:
    with contextlib.suppress(OSError):
        client.shutdown(socket.SHUT_RDWR)
    client.close()
