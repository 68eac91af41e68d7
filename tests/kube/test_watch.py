"""list-then-watch with fakes at the client boundary: the real server cannot drop a watch or expire a
resourceVersion on demand. (The real-server path is exercised by every --wait/delete --wait test.)"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from kubetrain.kube import watch
from kubetrain.kube.errors import ApiError, Unreachable
from kubetrain.kube.watch import WaitTimeout


def obj(name: str, rv: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, "status": {"phase": phase}}


class Response:
    """Quacks like the urllib3 response the client returns with _preload_content=False."""

    def __init__(self, data: Any = None, lines: list[Any] | None = None, drop: bool = False) -> None:
        self.data = json.dumps(data).encode() if data is not None else b""
        self.lines, self.drop, self.closed = lines or [], drop, False

    def stream(self, amt: Any = None, decode_content: Any = None) -> Iterator[bytes]:
        for line in self.lines:
            yield (json.dumps(line) + "\n").encode()
        if self.drop:
            raise http.client.IncompleteRead(b"")

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass


class FakeApi:
    """list_fn: answers lists and watches from scripts, recording the resourceVersion each watch asked for."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[Response | ApiError]) -> None:
        self.lists, self.watches = lists, watches
        self.calls: list[tuple[str, str | None]] = []

    def __call__(self, **kwargs: Any) -> Response:
        assert kwargs["_preload_content"] is False and kwargs["namespace"] == "ns"
        if kwargs.get("watch"):
            self.calls.append(("watch", kwargs["resource_version"]))
            assert kwargs["allow_watch_bookmarks"] and kwargs["timeout_seconds"] >= 1
            answer = self.watches.pop(0) if self.watches else Response()
            if isinstance(answer, ApiError):
                raise answer
            return answer
        items = self.lists.pop(0)
        rv = str(max([int(i["metadata"]["resourceVersion"]) for i in items], default=1))
        self.calls.append(("list", rv))
        return Response({"metadata": {"resourceVersion": rv}, "items": items})


def gone_event() -> dict[str, Any]:
    return {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                        "message": "too old resource version: 5 (20)"}}


def test_dropped_watch_resumes_from_the_last_version_seen() -> None:
    api = FakeApi([[obj("a", "5")]], [
        Response(lines=[{"type": "MODIFIED", "object": obj("a", "6")},
                        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}], drop=True),
        Response(lines=[{"type": "ADDED", "object": obj("b", "10")}]),
    ])
    events = watch.stream(api, timeout=30, namespace="ns")
    seen = [next(events) for _ in range(3)]
    assert [e.type for e in seen] == ["SYNC", "MODIFIED", "ADDED"]
    assert api.calls == [("list", "5"), ("watch", "5"), ("watch", "9")]  # resumed after the bookmark, no re-list


def test_410_gone_event_relists_and_syncs() -> None:
    api = FakeApi([[obj("a", "5")], [obj("a", "20", "Succeeded")]], [
        Response(lines=[gone_event()]),
        Response(lines=[{"type": "DELETED", "object": obj("a", "21")}]),
    ])
    events = watch.stream(api, timeout=30, namespace="ns")
    seen = [next(events) for _ in range(3)]
    assert [e.type for e in seen] == ["SYNC", "SYNC", "DELETED"]
    assert seen[1].objects[0]["status"]["phase"] == "Succeeded"
    assert api.calls == [("list", "5"), ("watch", "5"), ("list", "20"), ("watch", "20")]


def test_410_as_an_http_status_relists_too() -> None:
    api = FakeApi([[obj("a", "5")], [obj("a", "30")]], [ApiError.of(410, "Gone", "")])
    events = watch.stream(api, timeout=30, namespace="ns")
    assert [next(events).type for _ in range(2)] == ["SYNC", "SYNC"]
    assert api.calls[:3] == [("list", "5"), ("watch", "5"), ("list", "30")]


def test_other_watch_errors_propagate() -> None:
    # (5xx, 429 and 404 after a first good list are a restarting API server: retried, see below.)
    api = FakeApi([[obj("a", "5")]], [Response(lines=[{"type": "ERROR", "object": {"code": 403, "reason": "x",
                                                                                  "message": "boom"}}])])
    events = watch.stream(api, timeout=30, namespace="ns")
    next(events)
    with pytest.raises(ApiError) as caught:
        next(events)
    assert caught.value.status == 403


def test_wait_for_keeps_a_cache_across_events_and_relists() -> None:
    api = FakeApi([[obj("a", "5", "Pending"), obj("b", "4", "Pending")], [obj("a", "20", "Running")]], [
        Response(lines=[{"type": "MODIFIED", "object": obj("a", "6", "Running")}, gone_event()]),
        Response(lines=[{"type": "ADDED", "object": obj("c", "21", "Running")}]),
    ])

    def all_running(cache: dict[tuple[str, str], dict[str, Any]]) -> list[str] | None:
        phases = {name: o["status"]["phase"] for (_, name), o in cache.items()}
        return sorted(phases) if len(phases) == 2 and set(phases.values()) == {"Running"} else None

    # b vanished during the gap: the re-list's SYNC replaces the cache, so only a and c remain.
    assert watch.wait_for(api, all_running, timeout=30, what="x", namespace="ns") == ["a", "c"]


def test_wait_for_times_out_with_a_message() -> None:
    now = iter(range(0, 1000, 7))
    api = FakeApi([[obj("a", "5")]], [])
    events = watch.stream(api, timeout=20, clock=lambda: float(next(now)), namespace="ns")
    assert [e.type for e in events] == ["SYNC"]  # watches end empty, then the deadline passes
    with pytest.raises(WaitTimeout, match=r"timed out after 0.01s waiting for nothing"):
        watch.wait_for(FakeApi([[obj("a", "5")]], [Response()] * 1000), lambda cache: None, timeout=0.01,
                       what="nothing", namespace="ns")


def test_an_unreachable_server_is_retried_until_the_deadline_then_times_out() -> None:
    """An apiserver restart: the list is refused (Unreachable) a few times, then answers; later it stays
    away past the caller's timeout, which is a WaitTimeout (exit 4), not a failure of the job."""
    calls = {"n": 0}
    now = iter(range(0, 1000, 5))

    def flaky(**kwargs: Any) -> Response:
        calls["n"] += 1
        if calls["n"] <= 2 or calls["n"] >= 4:
            raise Unreachable("cannot reach https://127.0.0.1:1: is the cluster running?")
        if kwargs.get("watch"):
            return Response(lines=[])
        return Response(data={"metadata": {"resourceVersion": "1"}, "items": [obj("a", "1")]})

    heard: list[str] = []
    events = watch.stream(flaky, timeout=30, clock=lambda: float(next(now)), on_retry=heard.append,
                          sleep=lambda _s: None)
    assert next(events).type == "SYNC"  # the third try answered
    assert heard[0].startswith("cannot reach") and heard[1] == "reconnected to the API server"
    with pytest.raises(WaitTimeout) as caught:
        next(events)
    assert caught.value.exit_code == 4 and "unreachable" in str(caught.value)


def test_persist_backs_off_each_failure_once_resumes_after_a_lost_server_and_relists_after_others() -> None:
    """The controller's informers: nothing ends the stream; a lost server resumes from the last version, a
    refusal or an unreadable watch re-lists; every failure is one backoff (no retry loop underneath)."""
    script: list[Any] = [
        ("list", ApiError.of(403, "Forbidden", '{"kind": "Status", "code": 403}')),
        ("list", [obj("a", "5")]),
        ("watch 5", Unreachable("cannot reach https://127.0.0.1:1: is the cluster running?")),
        ("watch 5", Response(lines=[{"type": "ADDED", "object": obj("b", "7")}])),
        ("watch 7", ValueError("not JSON")),
        ("list", [obj("a", "5"), obj("b", "8")]),
    ]
    calls: list[str] = []

    def list_fn(**kwargs: Any) -> Response:
        call = f"watch {kwargs['resource_version']}" if kwargs.get("watch") else "list"
        calls.append(call)
        expected, answer = script.pop(0)
        assert call == expected, (call, expected)
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, Response):
            return answer
        rv = str(max(int(i["metadata"]["resourceVersion"]) for i in answer))
        return Response({"metadata": {"resourceVersion": rv}, "items": answer})

    sleeps: list[float] = []
    heard: list[str] = []
    events = watch.stream(list_fn, sleep=sleeps.append, on_retry=heard.append, persist=True, namespace="ns")
    seen = [next(events) for _ in range(3)]
    assert [(e.type, [watch.key(o)[1] for o in e.objects] or [watch.key(e.obj)[1]]) for e in seen] == [
        ("SYNC", ["a"]), ("ADDED", ["b"]), ("SYNC", ["a", "b"])]
    assert calls == ["list", "list", "watch 5", "watch 5", "watch 7", "list"]
    assert len(sleeps) == 3 and all(0 < s <= 10 for s in sleeps)
    assert heard[0].startswith("403 Forbidden") and heard[1] == "reconnected to the API server"
