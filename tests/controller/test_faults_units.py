"""The controller's per-job failures: classified, counted for /metrics, never raised out of a loop; the rounds
read their jobs concurrently, so one stuck call never holds the others."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kubetrain.controller import statusprogress
from kubetrain.controller.faults import ErrorCounter, Fanout, kind_of
from kubetrain.controller.written import WrittenStatus
from kubetrain.errors import ClusterError
from kubetrain.kube.errors import ApiError, TimedOut, Unreachable, cluster_errors
from kubetrain.metrics import format_metrics


def _translated(status: int) -> ClusterError:
    try:
        with cluster_errors("patch trainingjobs"):
            raise ApiError.of(status, "x", "{}")
    except ClusterError as exc:
        return exc
    raise AssertionError("not translated")


def test_failures_are_classified_through_the_clis_translation() -> None:
    assert kind_of(ApiError.of(404, "Not Found", "")) == "NotFound"
    assert kind_of(_translated(404)) == "NotFound"
    assert kind_of(_translated(409)) == "Conflict"
    assert kind_of(_translated(403)) == "Forbidden"
    assert kind_of(ApiError.of(503, "Unavailable", "")) == "ServerError"
    assert kind_of(TimedOut("no answer")) == "Timeout"
    assert kind_of(TimeoutError()) == "Timeout"
    assert kind_of(Unreachable("refused")) == "Unreachable"
    assert kind_of(KeyError("spec")) == "KeyError"


def _running(name: str, step: int = 0) -> dict[str, Any]:
    progress_now = {"step": step} if step else {}
    return {"metadata": {"namespace": "ns", "name": name, "uid": name},
            "status": {"phase": "Running", "target": "pytorchjob", "progress": progress_now}}


class _Jobs:
    def __init__(self, objs: list[dict[str, Any]]) -> None:
        self.objs = objs

    def items(self) -> list[dict[str, Any]]:
        return self.objs


def test_a_job_deleted_before_its_progress_patch_is_counted_and_the_others_are_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [format_metrics("train", rank=0, step=5, total_steps=10, loss=0.5, time=1.0)]
    monkeypatch.setattr(statusprogress, "read_tail", lambda *args: lines)
    patched: list[str] = []

    def patch_status(api: Any, namespace: str, name: str, status: dict[str, Any]) -> None:
        if name == "deleted":  # gone between the informer's snapshot and the patch
            raise ApiError.of(404, "Not Found", '{"kind":"Status","reason":"NotFound"}')
        patched.append(name)

    monkeypatch.setattr(statusprogress.kube, "patch_status", patch_status)
    errors = ErrorCounter()
    fanout: Fanout[bool] = Fanout("progress", errors)
    read = statusprogress.poll_once(None, _Jobs([_running("a"), _running("deleted"), _running("b")]), 200,  # type: ignore[arg-type]
                              fanout)
    fanout.close()
    assert read == 2 and sorted(patched) == ["a", "b"]
    assert errors.metrics() == {'errors_total{loop="progress",kind="NotFound"}': 1.0}


def test_a_round_runs_its_jobs_concurrently_and_does_not_wait_for_a_stuck_one() -> None:
    errors = ErrorCounter()
    fanout: Fanout[str] = Fanout("hang", errors, parallel=4, deadline=1.0)
    both = threading.Barrier(2, timeout=30)  # breaks (an error) unless a and b run at the same time
    release = threading.Event()

    def together(name: str) -> str:
        both.wait()
        return name

    def stuck() -> str:
        release.wait(60)
        return "stuck"

    try:
        calls = [(("ns", "a"), lambda: together("a")), (("ns", "b"), lambda: together("b")), (("ns", "s"), stuck)]
        assert sorted(fanout.run(calls)) == ["a", "b"]
        assert errors.counts() == {("hang", "Timeout"): 1}
        # The stuck job's call has not ended: the next round leaves it alone rather than piling up calls.
        assert fanout.run([(("ns", "s"), stuck)]) == []
        assert errors.counts() == {("hang", "Timeout"): 1}
    finally:
        release.set()
        fanout.close()


def test_the_written_status_stands_in_only_until_the_cache_holds_it() -> None:
    written = WrittenStatus()
    written.wrote("u", {"phase": "Running"}, "5")
    written.delivered("u", "4")  # an older event: the cache still lags behind our write
    assert written.get("u") == {"phase": "Running"}
    written.delivered("u", "5")  # from now on a status someone else writes is seen, and written back
    assert written.get("u") is None
    written.delivered("u", "7")
    written.wrote("u", {"phase": "Failed"}, "7")  # the watch was quicker than the bookkeeping
    assert written.get("u") is None
    written.wrote("u", {"phase": "Failed"}, "8")
    written.delivered("u", "", gone=True)
    assert written.get("u") is None
