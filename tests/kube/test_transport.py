"""kubetrain.kube.transport (the REST client's http.client transport): keep-alive pool, TLS, streams, and
how its failures are classified (kubetrain.kube.errors / retry).

Real sockets: a local server scripted per connection for what a real API server will not do on demand
(reset mid-body, never answer, close an idle keep-alive connection), and the test control plane's
kube-apiserver for TLS (client certificate, CA, tls-server-name), keep-alive and chunked watch streams.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kubetrain.kube import kubeconfig, transport
from kubetrain.kube.errors import Unreachable, describe_network_error, is_timeout
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.rest import Rest
from kubetrain.kube.retry import RetryPolicy, is_connection_reset
from kubetrain.kube.watch import iter_lines

Script = Callable[[socket.socket, int], None]  # (accepted connection, its number from 0) -> serve it
BODY = json.dumps({"kind": "NamespaceList", "items": [{"metadata": {"name": "default"}}]}).encode()


def read_request(conn: socket.socket) -> bytes:
    """One request's head (these tests send no bodies); b"" when the client closed the connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    return data


def answer(conn: socket.socket, body: bytes = BODY, extra: str = "") -> None:
    conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
                 .encode() + body)


def keep_alive(conn: socket.socket, _: int) -> None:
    while read_request(conn):
        answer(conn)


@pytest.fixture
def serve() -> Iterator[Callable[[Script], str]]:
    """serve(script) -> "http://127.0.0.1:PORT": each accepted connection runs script(conn, n) in a thread."""
    sockets: list[socket.socket] = []

    def start(script: Script) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        sockets.append(listener)

        def accept() -> None:
            for n in range(1000):
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                sockets.append(conn)
                threading.Thread(target=_run, args=(script, conn, n), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for sock in sockets:
        sock.close()


def _run(script: Script, conn: socket.socket, n: int) -> None:
    with contextlib.suppress(OSError):  # the client went away
        script(conn, n)


def rest(server: str, **kwargs: Any) -> Rest:
    return Rest(Endpoint(server=server, context="test", namespace=None), **kwargs)


# ---- the pool ---------------------------------------------------------------------------------------------
def test_one_connection_is_kept_alive_and_threads_share_the_pool(serve: Callable[[Script], str]) -> None:
    client = rest(serve(keep_alive))
    for _ in range(20):
        assert client.get("/api/v1/namespaces")["items"][0]["metadata"]["name"] == "default"
    assert client.pool.opened == 1
    results: list[dict[str, Any]] = []
    threads = [threading.Thread(target=lambda: results.extend(client.get("/x") for _ in range(10)))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 80 and all(r["kind"] == "NamespaceList" for r in results)
    assert 1 <= client.pool.opened <= 9 and len(client.pool._idle) <= client.pool.maxsize


def test_a_connection_the_server_closed_while_idle_is_replaced(serve: Callable[[Script], str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def one_answer_each(conn: socket.socket, _: int) -> None:  # keep-alive as far as the client knows
        if read_request(conn):
            answer(conn)
        conn.close()

    client = rest(serve(one_answer_each), policy=RetryPolicy(attempts=1))  # no retries by the REST client
    client.get("/a")
    time.sleep(0.1)
    client.get("/b")  # seen closed before reuse
    assert client.pool.opened == 2
    # Closed between the check and the send (the server's keep-alive timeout racing us): sent again, once.
    monkeypatch.setattr(transport, "_dropped", lambda sock: False)
    time.sleep(0.1)
    client.get("/c")
    assert client.pool.opened == 3


# ---- failures, and how they are classified ----------------------------------------------------------------
def test_a_body_cut_short_or_reset_is_retried_then_named(serve: Callable[[Script], str]) -> None:
    def cut_then_answer(conn: socket.socket, n: int) -> None:
        read_request(conn)
        if n == 0:  # half a body, then a plain close
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(BODY)}\r\n\r\n".encode() + BODY[:10])
        elif n == 1:  # an RST (SO_LINGER 0) before any answer
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            answer(conn)
        conn.close()

    server = serve(cut_then_answer)
    sleeps: list[float] = []
    assert rest(server, sleep=sleeps.append).get("/x")["kind"] == "NamespaceList"
    assert len(sleeps) == 2  # two connection failures, each retried with backoff
    with pytest.raises(http.client.IncompleteRead) as cut:
        transport.Pool(serve(cut_then_answer)).request("GET", "/x", connect_timeout=5, read_timeout=5)
    assert is_connection_reset(cut.value) and not is_timeout(cut.value)
    reset = RetryPolicy(attempts=1)
    with pytest.raises(Unreachable, match=r"^cannot reach http://127.0.0.1:\d+ \(IncompleteRead"):
        rest(serve(cut_then_answer), policy=reset).get("/x")


def test_a_server_that_never_answers_is_a_read_timeout(serve: Callable[[Script], str]) -> None:
    def silent(conn: socket.socket, _: int) -> None:
        read_request(conn)
        time.sleep(10)

    server = serve(silent)
    with pytest.raises(TimeoutError) as caught:
        transport.Pool(server).request("GET", "/x", connect_timeout=5, read_timeout=0.3)
    assert is_timeout(caught.value) and not is_connection_reset(caught.value)
    with pytest.raises(Unreachable, match=r"did not answer within 0\.3s: the API server is overloaded or hung"):
        rest(server, request_timeout=0.3).get("/x")


def test_refused_dns_and_connect_timeouts_read_as_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConnectionRefusedError) as refused:
        transport.Pool(f"http://127.0.0.1:{port}").request("GET", "/", connect_timeout=5, read_timeout=5)
    assert describe_network_error(refused.value, "S") == ("cannot reach S: is the cluster running? "
                                                          "(kubectl cluster-info)")
    dns = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert describe_network_error(dns, "S") == ("cannot reach S: its host name does not resolve (check the "
                                                "kubeconfig's server address)")
    slow = transport.ConnectTimeout("connection to 10.0.0.1:6443 timed out (connect timeout 10s)")
    assert describe_network_error(slow, "S", 30).startswith("cannot reach S (connection to 10.0.0.1:6443 timed out")
    assert not is_connection_reset(slow)
    with pytest.raises(Unreachable, match="expected https://host"):
        rest("ftp://somewhere")


def test_shutdown_unblocks_a_quiet_stream_read_in_another_thread(serve: Callable[[Script], str]) -> None:
    def one_line_then_quiet(conn: socket.socket, _: int) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello\n\r\n")
        time.sleep(30)

    response = rest(serve(one_line_then_quiet)).request("GET", "/log", stream=True, read_timeout=None)
    assert_shutdown_unblocks(response, "hello")


def assert_shutdown_unblocks(response: Any, first_line: str) -> None:
    lines: list[str] = []
    ended = threading.Event()

    def read() -> None:
        with contextlib.suppress(OSError, http.client.HTTPException, ValueError):  # cut: what logstream expects
            lines.extend(iter_lines(response))
        ended.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 30
    while not lines and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lines and first_line in lines[0]
    assert not ended.wait(0.3)  # blocked: the stream is quiet and has no read timeout
    response.shutdown()
    assert ended.wait(10)
    response.close()


# ---- against the real kube-apiserver (TLS with a client certificate) ---------------------------------------
@pytest.fixture
def endpoint(controlplane: Any) -> Endpoint:
    found = kubeconfig.load(str(controlplane.kubeconfig))
    assert found is not None and found.cert_data and found.ca_data
    return found


@pytest.mark.controlplane
def test_tls_keep_alive_and_a_chunked_watch_against_the_apiserver(endpoint: Endpoint) -> None:
    client = Rest(endpoint)
    for _ in range(5):
        assert client.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"
    assert client.pool.opened == 1  # TLS 1.3 session tickets must not make the idle connection look closed
    started = time.monotonic()
    response = client.request("GET", "/api/v1/namespaces", {"watch": True, "timeoutSeconds": 1}, stream=True)
    events = [json.loads(line) for line in iter_lines(response) if line.strip()]
    response.release_conn()
    assert time.monotonic() - started >= 0.9  # the server ended the stream after timeoutSeconds
    assert "ADDED" in {e["type"] for e in events} and "default" in {e["object"]["metadata"]["name"] for e in events}
    client.get("/version")
    assert client.pool.opened == 1  # the stream was read to its end: its connection went back to the pool


@pytest.mark.controlplane
def test_shutdown_unblocks_a_quiet_tls_watch(endpoint: Endpoint) -> None:
    response = Rest(endpoint).request("GET", "/api/v1/namespaces", {"watch": True, "timeoutSeconds": 60,
                                      "fieldSelector": "metadata.name=default"}, stream=True, read_timeout=None)
    assert_shutdown_unblocks(response, '"ADDED"')


@pytest.mark.controlplane
def test_tls_server_name_ca_and_insecure(endpoint: Endpoint) -> None:
    def get(**changes: Any) -> dict[str, Any]:
        fields = {**endpoint.__dict__, **changes}
        return Rest(Endpoint(**fields), policy=RetryPolicy(attempts=1)).get("/version")

    assert get(tls_server_name="kubernetes.default")["major"]  # a name in the serving certificate
    with pytest.raises(Unreachable, match=r"^TLS error talking to https://127\.0\.0\.1:\d+: .*wrong\.example"):
        get(tls_server_name="wrong.example")
    from tests.testenv import pki

    other_ca = pki.make_ca("not-the-cluster-ca").cert_pem
    with pytest.raises(Unreachable, match=r"^TLS error talking to .*certificate verify failed"):
        get(ca_data=other_ca)
    assert get(ca_data=other_ca, insecure=True)["major"]
