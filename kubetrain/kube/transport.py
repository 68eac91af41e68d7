"""HTTP/1.1 keep-alive connections to one API server, on the standard library's http.client.

Why not urllib3: importing it costs ~95 ms of a `kubetrain status` whose whole budget is 300 ms (its
modules, `logging`, and `importlib.metadata`, which `urllib3.http2` loads only to read h2's version),
while http.client and ssl are loaded anyway. What kubetrain.kube.rest needs from a transport is small
and lives here: a thread-safe pool of idle connections (status lists events from several threads), TLS
from an `ssl.SSLContext` with an optional SNI / verification name (kubeconfig `tls-server-name`), a
connect timeout (TCP connect and TLS handshake; a handshake that times out reads as "did not answer", as
with urllib3) and a read timeout, and a response that can be read whole (`data`), in pieces (`read1`,
`stream`, for chunked watches and log streams), and unblocked from another thread (`shutdown`).

Errors are the standard library's: ConnectionRefusedError, socket.gaierror, ssl.SSLError,
ConnectTimeout (below; a TimeoutError would read as "did not answer"), TimeoutError for a read,
ConnectionResetError / BrokenPipeError / http.client.RemoteDisconnected / IncompleteRead for a
connection dropped mid-request. kubetrain.kube.errors and .retry classify them.
"""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"}
DROPPED = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, http.client.RemoteDisconnected)


class ConnectTimeout(OSError):
    """The TCP connection was not established in time (the server is unreachable, not slow)."""


class Connection(http.client.HTTPConnection):
    """One connection; TLS when `context` is given, verifying (and sending as SNI) `server_hostname`."""

    def __init__(self, host: str, port: int, timeout: float | None, context: ssl.SSLContext | None,
                 server_hostname: str | None) -> None:
        super().__init__(host, port, timeout=timeout)
        self.context, self.server_hostname = context, server_hostname

    def connect(self) -> None:
        try:
            super().connect()  # TCP (with TCP_NODELAY), bounded by the connect timeout
        except TimeoutError:
            raise ConnectTimeout(f"connection to {self.host}:{self.port} timed out "
                                 f"(connect timeout {self.timeout:g}s)") from None
        if self.context is not None:  # the handshake is bounded by the connect timeout too, as kubectl's
            self.sock = self.context.wrap_socket(self.sock, server_hostname=self.server_hostname or self.host)


class Pool:
    """Idle keep-alive connections to one server (scheme://host:port[/prefix]); thread-safe.

    Never blocks: a request finding no idle connection opens a new one, and at most `maxsize` idle ones are
    kept (as urllib3's PoolManager(maxsize=32, block=False) did)."""

    def __init__(self, server: str, context: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 maxsize: int = 32) -> None:
        url = urlsplit(server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"server {server!r}: expected https://host[:port] or http://host[:port]")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")  # e.g. a Rancher proxy's /k8s/clusters/c-xxxx
        self.context = context if url.scheme == "https" else None
        if url.scheme == "https" and self.context is None:
            self.context = ssl.create_default_context()
        self.server_hostname, self.maxsize = server_hostname, maxsize
        self.opened = 0  # connections made (tests check that keep-alive works)
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

    def request(self, method: str, target: str, body: bytes | None = None, headers: Mapping[str, str] | None = None,
                *, connect_timeout: float, read_timeout: float | None, preload: bool = True) -> Response:
        """Send one request (target: path and query) and read the status line and headers; with `preload`
        the body too, and the connection is back in the pool when this returns."""
        conn, reused = self._get(connect_timeout)
        try:
            response = self._exchange(conn, method, target, body, headers, read_timeout)
        except DROPPED:
            conn.close()
            if not (reused and method in IDEMPOTENT):
                raise
            # The server closed the idle connection as we reused it (keep-alive timeout): a new one, once.
            conn, _ = self._get(connect_timeout, fresh=True)
            response = self._exchange(conn, method, target, body, headers, read_timeout)
        if preload:
            response.data  # noqa: B018 (reads the body; releases the connection)
        return response

    def _exchange(self, conn: Connection, method: str, target: str, body: bytes | None,
                  headers: Mapping[str, str] | None, read_timeout: float | None) -> Response:
        try:
            if conn.sock is None:
                conn.connect()
            sock = conn.sock
            sock.settimeout(read_timeout)  # TLS handshake done: from here on, reads wait this long
            conn.request(method, self.prefix + target, body=body, headers=dict(headers or {}))
            return Response(self, conn, sock, conn.getresponse())
        except BaseException:
            conn.close()
            raise

    def _get(self, connect_timeout: float, fresh: bool = False) -> tuple[Connection, bool]:
        while not fresh:
            with self._lock:
                if not self._idle:
                    break
                conn = self._idle.pop()
            if not _dropped(conn.sock):
                return conn, True
            conn.close()
        conn = Connection(self.host, self.port, connect_timeout, self.context, self.server_hostname)
        with self._lock:
            self.opened += 1
        return conn, False

    def open_socket(self, connect_timeout: float) -> socket.socket:
        """A new connection's socket (TCP and TLS as for requests), for a protocol that takes the connection
        over after an HTTP upgrade (the exec WebSocket, kubetrain.kube.podexec); never pooled."""
        conn = Connection(self.host, self.port, connect_timeout, self.context, self.server_hostname)
        with self._lock:
            self.opened += 1
        conn.connect()
        sock, conn.sock = conn.sock, None
        return sock

    def put(self, conn: Connection) -> None:
        """Take back a connection whose response was read to its end."""
        with self._lock:
            if conn.sock is not None and len(self._idle) < self.maxsize:
                self._idle.append(conn)
                return
        conn.close()


def _dropped(sock: socket.socket | None) -> bool:
    """An idle keep-alive connection that is readable has been closed by the server (or sent garbage)."""
    if sock is None:
        return True
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    try:
        if hasattr(select, "poll"):  # select() cannot watch a descriptor above 1023
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class Response:
    """What the callers use of a response: status, reason, headers (case-insensitive `.get`), `data`
    (the whole body; the connection then goes back to the pool), `read1`/`stream` (chunked watch and log
    streams), `release_conn`, `close`, and `shutdown` (unblocks a read in another thread)."""

    def __init__(self, pool: Pool, conn: Connection, sock: socket.socket, raw: http.client.HTTPResponse) -> None:
        self._pool, self._conn, self._sock, self._raw = pool, conn, sock, raw
        self.status, self.reason, self.headers = raw.status, raw.reason, raw.headers
        self._data: bytes | None = None
        self._done = False  # the connection was returned or closed
        self._lock = threading.Lock()  # logstream closes a response from another thread than the reader's

    @property
    def data(self) -> bytes:
        if self._data is None:
            try:
                self._data = self._raw.read()
            except BaseException:
                self.close()
                raise
            self._finish(complete=True)
        return self._data

    def read1(self, amount: int = 65536) -> bytes:
        """At most `amount` bytes, as soon as some arrive; b"" at the end of the body."""
        if self._done:
            return b""
        try:
            chunk = self._raw.read1(amount)
        except BaseException:
            self.close()
            raise
        if not chunk:
            self._finish(complete=self._raw.isclosed() or self._raw.length == 0)
        return chunk

    def stream(self, amount: int = 65536, decode_content: bool | None = None) -> Iterator[bytes]:
        """The body in pieces as they arrive (urllib3's signature; nothing is ever content-encoded here:
        http.client asks for `Accept-Encoding: identity`)."""
        while chunk := self.read1(amount):
            yield chunk

    def release_conn(self) -> None:
        """Give the connection back if the body was read to its end, else close it (an unread body would
        be read as the next response)."""
        self._finish(complete=self._raw.isclosed() or self._raw.length == 0)

    def close(self) -> None:
        self._finish(complete=False)

    def shutdown(self) -> None:
        """Unblock a read blocked in another thread: it then sees an error or the end of the stream.
        socket.socket's shutdown, not SSLSocket's: that one drops the TLS state under the reading thread."""
        with contextlib.suppress(OSError):  # already closed
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def _finish(self, complete: bool) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        self._raw.close()
        if complete and not self._raw.will_close:
            self._pool.put(self._conn)
        else:
            self._conn.close()
            self._sock.close()  # a will_close response owns the socket (http.client handed it over)
