"""The controller's informer has one backoff around its watch (watch.stream's): its requests are not retried
underneath by the client, and a refused list is waited out and listed again. A real HTTP server plays the
API server (the real one cannot answer 503 on demand)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from kubetrain.controller import kube
from kubetrain.controller.crd import GROUP, PLURAL, VERSION
from kubetrain.controller.informer import Informer
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.rest import Rest

JOB = {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5"}}


class Server(BaseHTTPRequestHandler):
    """Lists answer from `lists` (a status, or 200 with JOB); watches end empty after a moment."""

    lists: ClassVar[list[int]] = []
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        watching = "watch=true" in self.path
        status = 200 if watching or not self.lists else self.lists.pop(0)
        self.seen.append(f"{'watch' if watching else 'list'} {status}")
        if watching:
            time.sleep(0.05)
        body = b"" if watching else json.dumps(
            {"metadata": {"resourceVersion": "5"}, "items": [JOB]} if status == 200 else
            {"kind": "Status", "code": status, "reason": "ServiceUnavailable"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def rest() -> Iterator[Rest]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    Server.lists, Server.seen = [], []
    yield Rest(Endpoint(server=f"http://127.0.0.1:{httpd.server_address[1]}", context=None, namespace=None))
    httpd.shutdown()
    httpd.server_close()


def test_a_refused_list_is_backed_off_by_the_informer_alone(rest: Rest, caplog: pytest.LogCaptureFixture) -> None:
    Server.lists = [503, 503]
    informer = Informer(PLURAL, kube.custom_list_fn(rest, GROUP, VERSION, PLURAL, "ns"), lambda _obj: None)
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,), daemon=True)
    with caplog.at_level(logging.WARNING, logger="kubetrain.controller"):
        thread.start()
        assert informer.synced.wait(10)
        stop.set()  # the thread ends at its next wait (the server is gone after the test)
    assert Server.seen[:3] == ["list 503", "list 503", "list 200"] and informer.items() == [JOB]
    # The client did not retry the 503s by itself: the informer's stream heard of the first one, and of its end.
    assert [r.getMessage() for r in caplog.records][:2] == [
        f"{PLURAL}: 503 Service Unavailable; retrying", f"{PLURAL}: reconnected to the API server"]
