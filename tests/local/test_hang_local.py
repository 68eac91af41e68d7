"""Hang and straggler detection on real `kubetrain run` jobs: two torchrun agents, gloo, a SIGSTOPped rank."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.metrics import parse_metrics_line
from tests.local.test_local_run import assert_no_processes_left
from tests.runtime.helpers import Run, final_state, ft_train, quiet_env, records, run_sync, worker_pid, write_spec
from tests.runtime.torchmod import require_torch
from tests.testenv.polling import wait_for

torch = require_torch()
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(300)]

# Small thresholds so that a test takes seconds: a step of this job takes ~10-40 ms.
HANG = {"timeoutSeconds": 4, "phaseTimeoutSeconds": 60}


def hang_spec(tmp_path: Path, hang: dict[str, Any], **train: Any) -> Path:
    tmp_path.mkdir(exist_ok=True)
    path = write_spec(tmp_path / "job.yaml", name="hang", train=ft_train(**train),
                      checkpoint={"dir": "/ckpt/hang", "everySteps": 4})
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["hang"] = {**HANG, **hang}
    path.write_text(yaml.safe_dump(doc))
    return path


def stop_rank_1(run: Run, marker: str, at_step: int) -> int:
    run.wait_for(lambda r: r["kind"] == "train" and r["step"] >= at_step)
    pid = worker_pid(marker, 1)
    os.kill(pid, signal.SIGSTOP)
    return pid


def test_a_stopped_rank_is_named_with_stacks_and_the_run_fails(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    spec = hang_spec(tmp_path, {"policy": "fail"}, epochs=40, logEvery=2)
    run = Run(["-f", str(spec)], quiet_env(TEST_MARKER=marker, FT_SLEEP="0.001"))
    pid = 0
    try:
        pid = stop_rank_1(run, marker, 8)
        code, out, err = run.finish(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        run.kill()
    assert code == 1, out[-3000:] + err
    verdict = next(line for line in err.splitlines() if "hung since" in line)
    assert f"rank 1 (node 2, {os.uname().nodename}) stopped (SIGSTOP?), pid {pid}, state T" in verdict, err
    assert "1 rank waits in " in verdict, err
    assert "flight recorder: rank 0 in gloo:" in err and "rank 1 never entered it" in err, err
    assert "--- rank 0 (node 1): training thread" in err, err
    assert "_micro_step (loop.py:" in err or "_after_step (loop.py:" in err, err
    assert f"--- rank 1 (node 2, {os.uname().nodename}) stopped" in err, err
    assert "policy fail: stopping the job" in err
    assert_no_processes_left(marker)


def test_restart_resumes_from_the_checkpoint_with_identical_parameters(tmp_path: Path) -> None:
    baseline = run_sync(["-f", str(hang_spec(tmp_path / "base", {"policy": "restart"}, epochs=3)),
                         "--volume", f"ckpt={tmp_path / 'base-ckpt'}"], quiet_env())
    assert baseline.returncode == 0, baseline.stderr
    marker = uuid.uuid4().hex
    spec = hang_spec(tmp_path, {"policy": "restart", "maxRestarts": 1}, epochs=3)
    run = Run(["-f", str(spec), "--volume", f"ckpt={tmp_path / 'ckpt'}"],
              quiet_env(TEST_MARKER=marker, FT_SLEEP="0.002"))
    try:
        stop_rank_1(run, marker, 10)
        code, out, err = run.finish(timeout=180)
    finally:
        run.kill()
    assert code == 0, out[-3000:] + err
    assert "straggler" not in baseline.stderr, baseline.stderr  # a normal run names none
    assert "restarting the job from its last checkpoint (restart 1 of 1)" in err, err
    resumed = records(out, "resume")
    assert resumed and resumed[-1]["step"] >= 8, out[-3000:]
    expected = final_state(tmp_path / "base-ckpt" / "hang")["model"]
    got = final_state(tmp_path / "ckpt" / "hang")["model"]
    assert expected.keys() == got.keys()
    differ = [k for k, v in expected.items() if not (torch.equal(v, got[k]) if torch.is_tensor(v) else v == got[k])]
    assert differ == [], "parameters differ from the uninterrupted run"
    assert_no_processes_left(marker)


def test_a_slow_rank_is_reported_as_a_straggler_and_normal_runs_are_not_hung(tmp_path: Path) -> None:
    result = run_sync(["-f", str(hang_spec(tmp_path, {"policy": "fail"}, epochs=20, logEvery=20))],
                      quiet_env(FT_SLEEP="0.002", FT_SLEEP_RANKS="1"))
    assert result.returncode == 0, result.stderr
    assert "hung" not in result.stderr
    stragglers = [line for line in result.stderr.splitlines() if "straggler:" in line]
    assert len(stragglers) == 1 and "rank 1 (node 2" in stragglers[0], result.stderr


class Streams:
    """A background `kubetrain run` whose stdout and stderr are read by threads, so a test can wait on
    either (a waiting reader of one stream must not block the other's pipe)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.out: list[str] = []
        self.err: list[str] = []
        self.start = 0  # stderr lines before this index belong to an earlier test on the same run
        for stream, lines in ((run.proc.stdout, self.out), (run.proc.stderr, self.err)):
            threading.Thread(target=lambda s=stream, ls=lines: ls.extend(iter(s.readline, "")), daemon=True).start()

    def records(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in map(parse_metrics_line, list(self.out)) if r is not None and r["kind"] == kind]

    def step(self) -> int:
        return max((r["step"] for r in self.records("train")), default=0)

    def wait_step(self, step: int, timeout: float = 120) -> None:
        wait_for(lambda: self.step() >= step, f"training step {step}", timeout, guard=self._alive)

    def wait_eval(self, timeout: float = 120) -> None:
        """Until the run's first eval has ended: before it, a rank stopped in that eval is judged by
        phaseTimeoutSeconds (no earlier eval to time it by), after it, by the same floor as a step."""
        wait_for(lambda: bool(self.records("eval")), "the first eval", timeout, guard=self._alive)

    def mark(self) -> None:
        """From now on, wait_err and since see only the stderr lines written after this call."""
        self.start = len(self.err)

    def since(self) -> list[str]:
        return list(self.err)[self.start:]

    def wait_err(self, text: str, count: int = 1, timeout: float = 120) -> list[str]:
        def found() -> list[str] | None:
            lines = [line.rstrip() for line in self.since() if text in line]
            return lines if len(lines) >= count else None
        return wait_for(found, f"{count} stderr line(s) with {text!r}", timeout, guard=self._alive)

    def _alive(self) -> None:
        assert self.run.proc.poll() is None, "".join(self.err)[-3000:]


@contextlib.contextmanager
def throttled(pid: int, stopped: float = 0.1, running: float = 0.1) -> Iterator[None]:
    """SIGSTOP/SIGCONT the process in a loop: it runs `running` s of every `stopped + running` s."""
    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stopped)
            os.kill(pid, signal.SIGCONT)
            done.wait(running)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Streams, str]]:
    """A long two-node run with policy observe (reports, never stops), FT_SLEEP making a step ~20 ms, shared by
    the tests below (one start of torchrun agents and ranks instead of one per test): each waits for and
    judges only the stderr lines written since it began (Streams.mark)."""
    tmp_path = tmp_path_factory.mktemp("observed")
    marker = uuid.uuid4().hex
    spec = hang_spec(tmp_path, {"policy": "observe"}, epochs=1000, logEvery=2)
    run = Run(["-f", str(spec)], quiet_env(TEST_MARKER=marker, FT_SLEEP="0.001"))
    try:
        yield Streams(run), marker
    finally:
        run.kill()


def test_a_second_hang_after_a_recovered_stall_is_judged_by_the_usual_threshold(
        observed: tuple[Streams, str]) -> None:
    """Rank 1 stopped until the hang is reported, then resumed: that stall must not raise the threshold
    (before: 10 x a p99 step time that held the stall, about a minute here), so the next hang is found as
    soon as the first was."""
    streams, marker = observed
    streams.mark()
    streams.wait_eval()  # the first hang must be judged by the 4 s floor, in whichever phase it falls
    pid = worker_pid(marker, 1)
    try:
        os.kill(pid, signal.SIGSTOP)
        first = streams.wait_err("hung since")[0]
        os.kill(pid, signal.SIGCONT)
        streams.wait_step(streams.step() + 20)
        os.kill(pid, signal.SIGSTOP)
        second = streams.wait_err("hung since", count=2, timeout=180)[1]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    print(first, second, sep="\n")
    assert "(no progress for over 4 s, phase " in first, first
    assert "(no progress for over 4 s, phase " in second, second


def test_a_throttled_rank_is_named_a_straggler(observed: tuple[Streams, str]) -> None:
    """Rank 1 stopped 100 ms of every 200 ms: it loses wall time wherever it happens to be, mostly in one
    step of several, so its median step looks normal; the time it loses outside the collectives does not.
    On the shared run this comes after the recovered hangs above: their stalls must not hide the straggler."""
    streams, marker = observed
    streams.mark()
    streams.wait_step(streams.step() + 6)
    with throttled(worker_pid(marker, 1)):
        named = streams.wait_err("straggler:", timeout=120)
    print(named[0])
    assert "straggler: rank 1 (node 2, " in named[0], named
    assert not [line for line in streams.since() if "straggler: rank 0" in line or "hung since" in line], \
        streams.since()
