"""/healthz, /readyz and /metrics (Prometheus text) for the Deployment's probes and for the benchmark."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve(port: int, ready: Callable[[], bool], metrics: Callable[[], dict[str, float]],
          address: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve on `address`:`port` in a daemon thread (port 0: pick a free one; see server.server_port)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._send(200, "ok\n")
            elif self.path == "/readyz":
                self._send(200, "ok\n") if ready() else self._send(503, "not ready\n")
            elif self.path == "/metrics":
                self._send(200, "".join(f"kubetrain_controller_{k} {v}\n" for k, v in metrics().items()))
            else:
                self._send(404, "not found\n")

        def _send(self, code: int, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: not logged
            return

    server = ThreadingHTTPServer((address, port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
