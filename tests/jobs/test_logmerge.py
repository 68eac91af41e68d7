"""Pure log plumbing (timestamps, line assembly, dedup, prefixes, merge, progress line), and the pod follower
with a fake API at the client boundary: a stream cut mid-line, which the real server cannot do on demand."""

from __future__ import annotations

import http.client
import threading
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubetrain.jobs.logmerge import NO_TIME, Dedup, LineAssembler, Prefixer, merge, split_timestamp, style_for
from kubetrain.jobs.logstream import PodFollower
from kubetrain.jobs.pods import replica_of
from kubetrain.jobs.targets import PYTORCHJOB
from kubetrain.metrics import format_metrics
from kubetrain.observe.progress import ProgressTracker, format_duration
from tests.testenv.polling import wait_for


def test_timestamps_of_any_precision_and_zone_order_correctly():
    short = split_timestamp("2026-01-01T12:00:00.5Z a")[0]
    long_ = split_timestamp("2026-01-01T12:00:00.123456789Z b")[0]
    assert short > long_  # .5 s is later than .123456789 s, though "5Z" < "123456789Z" as strings
    assert split_timestamp("2026-01-01T13:00:00+01:00 x")[0] == split_timestamp("2026-01-01T12:00:00Z x")[0]
    assert split_timestamp("2026-01-01T12:00:00.000000001Z text with  spaces") == (
        1767268800_000000001, "2026-01-01T12:00:00.000000001Z", "text with  spaces")
    assert split_timestamp("no timestamp here") == (NO_TIME, "", "no timestamp here")
    assert split_timestamp("2026-99-99T99:00:00Z bogus")[0] == NO_TIME


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
                        max_size=30), max_size=20), st.lists(st.integers(1, 9), min_size=1, max_size=50))
def test_line_assembler_reassembles_lines_cut_anywhere(lines, cuts):
    data = "".join(line + "\n" for line in lines).encode()
    assembler, out, position, i = LineAssembler(), [], 0, 0
    while position < len(data):
        size = cuts[i % len(cuts)]
        out += assembler.feed(data[position:position + size])
        position, i = position + size, i + 1
    assert out + assembler.flush() == lines


def test_dedup_lets_only_new_lines_through_after_a_replay():
    dedup = Dedup()
    assert [dedup.accept(k) for k in (1, 2, 2)] == [True, True, True]
    dedup.begin_replay()  # the re-opened stream starts earlier
    assert [dedup.accept(k) for k in (1, 2, 2, 2, 3)] == [False, False, False, True, True]
    assert dedup.accept(NO_TIME)


def test_prefix_colours_are_stable_per_replica():
    assert style_for("master-0") == "bold cyan"
    assert style_for("worker-0") == style_for("node-0") != style_for("worker-1")
    assert Prefixer().format("worker-1", "x", "2026-01-01T12:00:00Z") == "[worker-1] 2026-01-01T12:00:00Z x"
    assert Prefixer(color=True).prefix("worker-1") == "\x1b[33m[worker-1]\x1b[0m "


def test_merge_is_in_time_order_and_stable():
    a = ["2026-01-01T12:00:00.1Z a1", "continuation without a timestamp", "2026-01-01T12:00:00.3Z a2"]
    b = ["2026-01-01T12:00:00.2Z b1", "2026-01-01T12:00:00.3Z b2"]
    assert list(merge([("master-0", a), ("worker-0", b)], Prefixer())) == [
        "[master-0] a1", "[master-0] continuation without a timestamp", "[worker-0] b1", "[master-0] a2",
        "[worker-0] b2"]


def test_progress_line_with_eta():
    tracker = ProgressTracker()
    assert tracker.line() is None and not tracker.feed("plain log line")
    for step, when in ((10, 100.0), (20, 110.0)):
        line = format_metrics("train", step=step, total_steps=120, epoch=1, loss=0.5, samples_per_s=1234.5,
                              lr=3e-4, gpu_mem_mb=12595.2, time=when, rank=0)
        assert tracker.feed(f"[master-0] {line}")
    assert tracker.line() == ("step 20/120 (17%) · epoch 1 · loss 0.5000 · 1,234 samples/s · lr 3.0e-04 · "
                              "gpu 12.3 GiB · ETA 1m40s")
    tracker.feed(format_metrics("end", status="completed", step=120, epoch=1, rank=0))
    assert tracker.line().startswith("step 120/120 (100%) · epoch 1")
    assert tracker.line().endswith("· training completed")
    assert format_duration(3 * 3600 + 125) == "3h02m"


# ---- the follower, with a fake CoreV1Api ------------------------------------------------------------------
class FakeResponse:
    def __init__(self, chunks: list[bytes], then: BaseException | None = None) -> None:
        self.chunks, self.then = list(chunks), then
        self.data = b"".join(chunks)

    def read1(self, _size: int) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        if self.then:
            raise self.then
        return b""

    def shutdown(self) -> None:
        self.chunks, self.then = [], None

    def release_conn(self) -> None:
        pass


class FakeCore:
    """Scripted log reads; records the arguments of every call."""

    def __init__(self, follow: list[FakeResponse], plain: bytes = b"") -> None:
        self.follow, self.plain, self.calls = follow, plain, []

    def __call__(self, pod: str, container: str | None, **kwargs: Any) -> FakeResponse:
        """PodFollower's opener: (pod, container, follow=, previous=, since_seconds=, tail_lines=)."""
        self.calls.append(kwargs)
        if kwargs.get("follow"):
            return self.follow.pop(0)
        return FakeResponse([self.plain])


def _pod(state: str = "running", phase: str = "Running", restarts: int = 0) -> dict[str, Any]:
    detail = {"exitCode": 0, "reason": "Completed"} if state == "terminated" else {}
    return {"metadata": {"name": "j-worker-0", "uid": "u1", "labels": {
        "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "0"}},
            "spec": {"containers": [{"name": "pytorch"}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "pytorch", "restartCount": restarts,
                                                              "state": {state: detail}}]}}


def T(n: int) -> str:  # a timestamp; short for readability
    return f"2026-01-01T12:00:0{n}.000000001Z"


def test_a_stream_cut_mid_line_resumes_without_repeating_or_losing_a_line():
    cut = http.client.IncompleteRead(b"", 120)  # what the transport raises when a chunked stream is cut
    first = FakeResponse([f"{T(1)} a\n{T(2)} b\n{T(3)} par".encode()], cut)
    # the re-opened stream starts before the cut (sinceSeconds) and sends the cut line whole
    second = FakeResponse([f"{T(1)} a\n{T(2)} b\n{T(3)} partial line\n{T(4)} d\n".encode()])
    core = FakeCore([first, second], plain=f"{T(3)} partial line\n{T(4)} d\n".encode())
    out: list[str] = []
    notices: list[str] = []
    follower = PodFollower(core, "ns", replica_of(_pod(), PYTORCHJOB), lambda label, _s, text: out.append(text),
                           notices.append)
    follower.start()
    deadline = time.monotonic() + 10
    while len(core.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    follower.update(replica_of(_pod("terminated", "Succeeded"), PYTORCHJOB))
    follower.join(10)
    assert not follower.is_alive()
    assert out == ["a", "b", "partial line", "d"]
    assert core.calls[0]["since_seconds"] is None and core.calls[1]["since_seconds"] >= 60  # resumed, with margin
    assert notices == []


def test_stop_interrupts_a_stream_that_never_ends_and_keeps_the_last_lines():
    class Endless(FakeResponse):
        def read1(self, _size: int) -> bytes:
            if self.chunks:
                return self.chunks.pop(0)
            self.stopped.wait(5)
            raise ConnectionResetError("shut down")

        def shutdown(self) -> None:
            self.stopped.set()

    endless = Endless([f"{T(1)} first\n".encode()])
    endless.stopped = threading.Event()
    core = FakeCore([endless], plain=f"{T(1)} first\n{T(2)} written while we were closing\n".encode())
    out: list[str] = []
    follower = PodFollower(core, "ns", replica_of(_pod(), PYTORCHJOB), lambda _l, _s, text: out.append(text),
                           lambda _: None)
    follower.start()
    wait_for(lambda: out, "the first line", 10, 0.01)
    follower.update(replica_of(_pod("terminated", "Succeeded"), PYTORCHJOB))
    follower.stop()

    def stopped() -> bool:
        follower.tick(time.monotonic())
        return not follower.is_alive()

    wait_for(stopped, "the follower to stop", 10, 0.05)
    assert out == ["first", "written while we were closing"]


@pytest.mark.parametrize("bad", ["worker_1", "Worker 1", ""])
def test_replica_filter_is_checked(bad):
    from kubetrain.errors import UsageError
    from kubetrain.jobs.pods import check_replica_filter

    with pytest.raises(UsageError, match="--replica"):
        check_replica_filter(bad)
