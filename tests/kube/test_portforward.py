"""The port-forward client (kubetrain.kube.portforward) against a scripted API server that speaks the kubelet's
WebSocket port-forward (v4.channel.k8s.io): the port header that opens each channel, data and error channels
apart, bytes both ways through the local listener, and refusals as one line."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest
from websocket import ABNF

from kubetrain.errors import ClusterError
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.portforward import DATA, ERROR, Channels, Forwarder, data_frame
from kubetrain.kube.rest import Rest
from kubetrain.kube.retry import RetryPolicy
from tests.testenv.polling import wait_for

PORT = 6006
HEADER = struct.pack("<H", PORT)
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
Script = Callable[[socket.socket], None]


# ---- the framing -------------------------------------------------------------------------------------------

def test_each_channel_opens_with_the_port_which_is_not_data() -> None:
    channels = Channels(PORT)
    assert channels.split(bytes([DATA]) + HEADER) == (DATA, b"")
    assert channels.split(bytes([ERROR]) + HEADER) == (ERROR, b"")
    assert channels.split(bytes([DATA]) + b"GET /") == (DATA, b"GET /")
    assert channels.split(bytes([ERROR]) + b"refused") == (ERROR, b"refused")
    assert channels.split(bytes([DATA]) + HEADER) == (DATA, HEADER)  # later: data that looks like a port


def test_a_header_split_over_frames_and_data_in_its_frame() -> None:
    channels = Channels(PORT)
    assert channels.split(bytes([DATA]) + HEADER[:1]) == (DATA, b"")
    assert channels.split(bytes([DATA]) + HEADER[1:] + b"x") == (DATA, b"x")


def test_a_header_for_another_port_and_unknown_channels() -> None:
    with pytest.raises(ClusterError, match="forwards port 80, not 6006"):
        Channels(PORT).split(bytes([DATA]) + struct.pack("<H", 80))
    assert Channels(PORT).split(b"") == (-1, b"")
    assert Channels(PORT).split(bytes([2]) + HEADER) == (-1, b"")


def test_data_for_the_pod_is_on_channel_0() -> None:
    assert data_frame(b"hi") == b"\x00hi"


# ---- a scripted API server ------------------------------------------------------------------------------

def send(conn: socket.socket, frame: bytes, opcode: int = ABNF.OPCODE_BINARY) -> None:
    conn.sendall(ABNF(1, 0, 0, 0, opcode, 0, frame).format())  # a server's frames are not masked


def receive(conn: socket.socket) -> tuple[int, bytes]:
    """One frame from the client (masked, as RFC 6455 requires of clients)."""
    first, second = _exactly(conn, 2)
    length = second & 0x7F
    if length == 126:
        length = struct.unpack(">H", _exactly(conn, 2))[0]
    elif length == 127:
        length = struct.unpack(">Q", _exactly(conn, 8))[0]
    mask = _exactly(conn, 4) if second & 0x80 else b"\0\0\0\0"
    payload = _exactly(conn, length)
    return first & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


class Server:
    """Answers GET of the pod (Running) over HTTP, and upgrades pods/portforward to `script` (or refuses it
    with `refuse`)."""

    def __init__(self, script: Script, refuse: tuple[int, dict[str, object]] | None = None,
                 phase: str = "Running") -> None:
        self.script, self.refuse, self.phase = script, refuse, phase
        self.paths: list[str] = []
        self.protocols: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            head = request.decode().split("\r\n")
            path = head[0].split()[1]
            self.paths.append(path)
            headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
            if not path.startswith("/api/v1/namespaces/ml/pods/board/portforward"):
                self._reply(conn, 200, {"kind": "Pod", "status": {"phase": self.phase}})
                return
            if self.refuse is not None:
                self._reply(conn, *self.refuse)
                return
            self.protocols.append(headers.get("sec-websocket-protocol", ""))
            accept = base64.b64encode(hashlib.sha1((headers["sec-websocket-key"] + GUID).encode()).digest())
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: " + accept + b"\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n")
            self.script(conn)

    @staticmethod
    def _reply(conn: socket.socket, code: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        conn.sendall(f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                     f"Connection: close\r\n\r\n".encode() + data)

    def close(self) -> None:
        self.listener.close()


@contextlib.contextmanager
def forwarding(script: Script, refuse: tuple[int, dict[str, object]] | None = None, phase: str = "Running"
               ) -> Iterator[tuple[Server, Forwarder, list[str]]]:
    server = Server(script, refuse, phase)
    rest = Rest(Endpoint(server=server.url(), context="test", namespace=None),
                policy=RetryPolicy(attempts=1, base=0.01, cap=0.1))
    reports: list[str] = []
    forwarder = Forwarder(rest, "ml", "board", PORT, report=reports.append)
    threading.Thread(target=forwarder.serve_forever, daemon=True).start()
    try:
        yield server, forwarder, reports
    finally:
        forwarder.close()
        server.close()


def echo_upper(conn: socket.socket) -> None:
    """The pod's side: the port headers, then each data frame back in capitals, until the client closes."""
    send(conn, bytes([DATA]) + HEADER)
    send(conn, bytes([ERROR]) + HEADER)
    while True:
        opcode, frame = receive(conn)
        if opcode == ABNF.OPCODE_CLOSE:
            return
        assert frame[0] == DATA, frame
        send(conn, bytes([DATA]) + frame[1:].upper())


def test_bytes_go_both_ways_one_websocket_per_connection() -> None:
    with forwarding(echo_upper) as (server, forwarder, reports):
        for word in (b"hello", b"again"):
            with socket.create_connection(forwarder.address, timeout=10) as local:
                local.sendall(word)
                assert _exactly(local, len(word)) == word.upper()
                local.sendall(b"x" * 100000)  # many frames, a 64-bit length among them
                assert _exactly(local, 100000) == b"X" * 100000
        assert forwarder.address[0] == "127.0.0.1"
        assert server.paths.count("/api/v1/namespaces/ml/pods/board/portforward?ports=6006") == 2
        assert server.protocols == ["v4.channel.k8s.io"] * 2
        assert reports == []


def answer_then_close(conn: socket.socket) -> None:
    """An HTTP-like exchange: one answer, then the pod's side closes (the server closes the WebSocket)."""
    send(conn, bytes([DATA]) + HEADER)
    send(conn, bytes([ERROR]) + HEADER)
    receive(conn)
    send(conn, bytes([DATA]) + b"HTTP/1.0 200 OK\r\n\r\n{}")
    send(conn, struct.pack(">H", 1000), ABNF.OPCODE_CLOSE)


def test_the_local_connection_ends_when_the_pods_side_does() -> None:
    with forwarding(answer_then_close) as (_, forwarder, reports):
        with socket.create_connection(forwarder.address, timeout=10) as local:
            local.sendall(b"GET / HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := local.recv(4096):
                answer += chunk
        assert answer == b"HTTP/1.0 200 OK\r\n\r\n{}"
        assert reports == []


def refused_port(conn: socket.socket) -> None:
    """The kubelet's answer when nothing listens on the port: its error text, then the WebSocket closes."""
    send(conn, bytes([DATA]) + HEADER)
    send(conn, bytes([ERROR]) + HEADER)
    send(conn, bytes([ERROR]) + b"error forwarding port 6006 to pod abc: connection refused")
    send(conn, struct.pack(">H", 1000), ABNF.OPCODE_CLOSE)


def test_the_kubelets_error_is_one_line_and_the_connection_closes() -> None:
    with forwarding(refused_port) as (_, forwarder, reports):
        with socket.create_connection(forwarder.address, timeout=10) as local:
            assert local.recv(4096) == b""
        wait_for(lambda: reports, "the kubelet's error reported", 10, 0.05)
        assert reports == ["ml/board:6006: error forwarding port 6006 to pod abc: connection refused"]


def test_a_forbidden_user_is_told_before_anything_listens_for_them() -> None:
    status = {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
              "message": 'pods "board" is forbidden: User "u" cannot create resource "pods/portforward"'}
    with forwarding(echo_upper, refuse=(403, status)) as (_, forwarder, _reports), \
            pytest.raises(ClusterError) as caught:
        forwarder.check()
    assert 'cannot create resource "pods/portforward"' in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_pod_that_is_not_running_is_one_line() -> None:
    with forwarding(echo_upper, phase="Pending") as (_, forwarder, _reports), \
            pytest.raises(ClusterError, match=r"^pod ml/board is not running \(phase Pending\)$"):
        forwarder.check()


def test_a_busy_local_port_is_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        rest = Rest(Endpoint(server="http://127.0.0.1:1", context="test", namespace=None))
        with pytest.raises(ClusterError, match=f"^cannot listen on 127.0.0.1:{port}: "):
            Forwarder(rest, "ml", "board", PORT, local_port=port)
