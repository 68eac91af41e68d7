"""The scripted fake API server: a loopback HTTP server that answers each request from a script, for the
answers the real API server cannot give on demand (429 with Retry-After, 503, a reset connection, Go's
plain-text 404 of a server that is no API server). Tests queue answers with `script(...)` (used in order)
and set what answers once the queue is empty with `otherwise(...)`; `seen` records every request and
`statuses` what it was answered."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class Seen:
    """One request as the server received it (header names in lower case)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass(frozen=True)
class Answer:
    """One scripted answer: a status, a body (a dict or list is sent as JSON), headers; or a reset connection."""

    status: int = 200
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    reset: bool = False
    delay: float = 0.0

    def payload(self) -> tuple[bytes, str]:
        if isinstance(self.body, (dict, list)):
            return json.dumps(self.body).encode(), "application/json"
        data = self.body.encode() if isinstance(self.body, str) else self.body
        return data, "text/plain; charset=utf-8"


RESET = Answer(reset=True)
Route = Callable[[Seen], Answer]


def status_answer(code: int, *, headers: dict[str, str] | None = None, **fields: Any) -> Answer:
    """The API server's Status object for an error `code` (extra fields go into the Status)."""
    return Answer(code, {"kind": "Status", "apiVersion": "v1", "code": code, **fields}, headers or {})


def files_under(root: Path) -> Route:
    """A route serving the files under `root` by path (404 for anything else), like a static mirror."""
    def serve(request: Seen) -> Answer:
        path = root / request.path.split("?", 1)[0].lstrip("/")
        return Answer(200, path.read_bytes()) if path.is_file() else Answer(404, b"not found\n")
    return serve


class FakeApi:
    """A loopback server answering from a script; `url` is where it listens."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.statuses: list[int] = []  # what each request in `seen` was answered (0: a reset connection)
        self._queue: list[Answer] = []
        self._otherwise: Route = lambda _request: Answer(200, {})
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def script(self, *answers: Answer) -> None:
        with self._lock:
            self._queue.extend(answers)

    def otherwise(self, route: Route | Answer) -> None:
        self._otherwise = route if callable(route) else (lambda _request: route)

    def answer(self, request: Seen) -> Answer:
        with self._lock:
            self.seen.append(request)
            queued = self._queue.pop(0) if self._queue else None
        answer = queued or self._otherwise(request)
        with self._lock:
            self.statuses.append(0 if answer.reset else answer.status)
        return answer

    def start(self) -> FakeApi:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler_for(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            headers = {name.lower(): value for name, value in self.headers.items()}
            body = self.rfile.read(int(headers.get("content-length") or 0))
            self._respond(api.answer(Seen(self.command, self.path, headers, body)))

        do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        def _respond(self, answer: Answer) -> None:
            time.sleep(answer.delay)
            if answer.reset:
                self.close_connection = True
                self.connection.close()
                return
            body, content_type = answer.payload()
            self.send_response(answer.status)
            self.send_header("Content-Type", content_type)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    api = FakeApi().start()
    try:
        yield api
    finally:
        api.close()
