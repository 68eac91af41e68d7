"""Start the torchrun agents of a RunPlan, merge their logs, stop them cleanly, leave no process behind.

* Each agent runs in its own session, so a terminal's Ctrl-C reaches only `kubetrain run`, which then sends
  SIGTERM to every agent; torchrun forwards it to its workers (the runtime checkpoints and exits 143) and
  SIGKILLs workers that outlive its shutdown timeout. A second Ctrl-C, or the grace period running out,
  SIGKILLs everything at once.
* Agents get SIGTERM from the kernel if `kubetrain run` itself dies (PR_SET_PDEATHSIG), so even a
  SIGKILLed `kubetrain run` does not leave a training job running.
* Every process of the run inherits KUBETRAIN_RUN_ID; after the agents exit, any process still carrying
  this run's id (e.g. a worker whose agent was killed) is killed, so no orphan survives.
* The rendezvous store runs in a process that node 1's launcher forks (kubetrain.runtime.launch), which ends
  when we close the pipe it holds, only after every agent has exited: no agent loses the store while it
  closes the rendezvous. It is not a leftover.
* With `divergence` (a plain script under spec.divergence.policy stop), the job is stopped like on Ctrl-C
  once its metrics lines show a non-finite loss, and the run exits EXIT_DIVERGED (65).
* Log lines become `[node-N rank-R] text` (worker output, via torchrun's --tee) or `[node-N] text` (the
  agent itself), all on stdout, since they are the job's output. The last lines of each rank are kept, for
  the ending of a failed run (kubetrain.local.endings).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import IO, Any, Protocol, TextIO

from kubetrain.local.endings import RankTails
from kubetrain.local.plan import NodeCommand, RunPlan
from kubetrain.metrics import EXIT_DIVERGED
from kubetrain.podenv import (
    FAILED_RANK,
    LAUNCH_TMPDIR_ENV,
    RUN_ID_ENV,
    STORE_HOLD_FD_ENV,
    STORE_HOST_ENV,
    STORE_PROCESS_NAME,
)

_RANK_LINE = re.compile(r"^\[rank-(\d+)\]:(.*)$", re.DOTALL)
FAILURE_GRACE_SECONDS = 15.0  # after one node fails (not elastic), how long the others get to notice
POLL_SECONDS = 0.1
TRACEBACK = "Traceback (most recent call last):"
PR_SET_PDEATHSIG = 1
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def format_line(node: int, text: str) -> str:
    """`[rank-3]:hello` from node 2 -> `[node-2 rank-3] hello`; anything else -> `[node-2] text`."""
    match = _RANK_LINE.match(text)
    if match:
        return f"[node-{node} rank-{match.group(1)}] {match.group(2)}"
    return f"[node-{node}] {text}"


def _term_with_parent() -> None:
    """In the agent, before exec: get SIGTERM if `kubetrain run` dies, even by SIGKILL (Linux only)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def processes_of_run(run_id: str) -> list[int]:
    """PIDs (other than ours) whose environment carries this run's id (Linux /proc; empty elsewhere)."""
    return processes_with_env(RUN_ID_ENV, run_id)


def processes_with_env(name: str, value: str) -> list[int]:
    """PIDs (other than ours) whose environment has `name=value` (Linux /proc; empty elsewhere)."""
    needle = f"{name}={value}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def has_no_children(pid: int) -> bool:
    """Whether process `pid` has no child process (Linux /proc/PID/task/*/children; False where unknown)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        return all(not _read(f"/proc/{pid}/task/{tid}/children").strip() for tid in tasks)
    except OSError:
        return False


def is_store(pid: int) -> bool:
    """Whether `pid` is the process serving a local run's rendezvous store (kubetrain.runtime.launch)."""
    try:
        return _read(f"/proc/{pid}/comm").strip() == STORE_PROCESS_NAME
    except OSError:
        return False


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


class Watch(Protocol):
    def check(self) -> bool:
        """Called every poll; True: stop the job now (it is hung)."""


class Supervisor:
    """Runs a plan to completion and returns the job's exit status."""

    def __init__(self, plan: RunPlan, out: TextIO | None = None, err: TextIO | None = None,
                 watch: Watch | None = None, divergence: Callable[[], str | None] | None = None) -> None:
        self.plan = plan
        self.watch = watch  # the hang watch (kubetrain.local.hangwatch)
        self.hung = False
        self.divergence = divergence  # `diverged at step N: loss nan` once the job's metrics say so
        self.diverged: str | None = None
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.procs: list[subprocess.Popen[bytes]] = []
        self.store_hold: int | None = None  # our end of the pipe that keeps the rendezvous store
        self.scratch = ""  # the agents' temporary files (torchrun's copies of the workers' output)
        self.readers: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.signum = 0
        self.force = False
        self.stop_deadline: float | None = None
        self.output_open = True
        self.failures: list[str] = []  # one line per failed rank, for the summary at the end
        self.tails = RankTails()  # each rank's last lines and the first failed rank, for the ending

    # --- public ---------------------------------------------------------------------------------------
    def run(self) -> int:
        previous = self._install_signals()
        self.scratch = tempfile.mkdtemp(prefix=f"kubetrain-{self.plan.run_id}-agents-")
        try:
            for node in self.plan.nodes:  # all agents first: no reader thread exists while forking
                self.procs.append(self._start(node))
            for node, proc in zip(self.plan.nodes, self.procs, strict=True):
                self._read(node.index, proc)
            code = self._wait()
        finally:
            self._kill_all()
            self._release_store()
            self._kill_leftovers()
            shutil.rmtree(self.scratch, ignore_errors=True)
            for reader in self.readers:
                reader.join(timeout=5)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return code

    # --- processes ------------------------------------------------------------------------------------
    def _start(self, node: NodeCommand) -> subprocess.Popen[bytes]:
        if node.env.get(STORE_HOST_ENV) != "1":
            return self._spawn(node.argv, node.env, stdout=subprocess.PIPE)
        hold, self.store_hold = os.pipe()
        try:
            return self._spawn(node.argv, {**node.env, STORE_HOLD_FD_ENV: str(hold)}, stdout=subprocess.PIPE,
                               keep=(hold,))
        finally:
            os.close(hold)

    def _spawn(self, argv: list[str], env: dict[str, str], stdout: int,
               keep: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
        env = {**env, LAUNCH_TMPDIR_ENV: self.scratch}
        return subprocess.Popen(argv, env=env, cwd=self.plan.cwd, stdin=subprocess.DEVNULL, stdout=stdout,
                                stderr=subprocess.PIPE, start_new_session=True, pass_fds=keep,
                                preexec_fn=_term_with_parent)  # noqa: PLW1509 - no threads yet

    def _release_store(self) -> None:
        """After every agent has exited: the store's process sees its pipe end and exits."""
        if self.store_hold is not None:
            os.close(self.store_hold)
            self.store_hold = None

    def _read(self, node: int, proc: subprocess.Popen[bytes]) -> None:
        for pipe in (proc.stdout, proc.stderr):
            assert pipe is not None
            reader = threading.Thread(target=self._pump, args=(node, pipe), daemon=True)
            reader.start()
            self.readers.append(reader)

    def _pump(self, node: int, pipe: IO[bytes]) -> None:
        held: list[str] | None = None  # an agent traceback, held back while we stop the job
        for raw in iter(pipe.readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            if held is None and text == TRACEBACK and self.stop_deadline is not None:
                held = [text]
                continue
            if held is not None:
                held.append(text)
                if text[:1].isspace() or text == held[0]:
                    continue
                # torchrun reports the stop we asked for as a SignalException traceback: not news
                lines, held = ([] if "SignalException" in text else held), None
                for line in lines:
                    self._write(format_line(node, line))
                continue
            if text.startswith(FAILED_RANK):
                self.failures.append(f"node-{node} {text.removeprefix(FAILED_RANK.removesuffix('rank '))}")
                self.tails.failed(node, text)
            elif match := _RANK_LINE.match(text):
                self.tails.line(node, int(match.group(1)), match.group(2))
            self._write(format_line(node, text))
        for line in held or []:
            self._write(format_line(node, line))
        pipe.close()

    def _write(self, line: str) -> None:
        with self.lock:
            if not self.output_open:
                return
            try:
                self.out.write(line + "\n")
                self.out.flush()
            except (BrokenPipeError, ValueError):  # the reader of our stdout went away; keep supervising
                self.output_open = False

    def _wait(self) -> int:
        failure: tuple[int, float] | None = None  # (first non-zero exit code, when)
        while True:
            codes = [proc.poll() for proc in self.procs]
            if all(code is not None for code in codes):
                break
            now = time.monotonic()
            if failure is None:
                failed = next((code for code in codes if code not in (None, 0)), None)
                failure = (failed, now) if failed is not None else None
            if self.signum and self.stop_deadline is None:
                name = signal.Signals(self.signum).name
                self._terminate(f"got {name}; stopping the job (the runtime checkpoints first)")
            elif failure and not self.plan.elastic and self.stop_deadline is None and self._workers_gone():
                self._stop_idle(failure[0])
            elif failure and not self.plan.elastic and self.stop_deadline is None \
                    and now - failure[1] > FAILURE_GRACE_SECONDS:
                self._terminate(f"a node exited with {failure[0]}; stopping the other nodes")
            if self.force or (self.stop_deadline is not None and now > self.stop_deadline):
                self._kill_all()
            elif self.stop_deadline is None:
                self._watch()
            time.sleep(POLL_SECONDS)
        if self.hung:
            return 1
        if self.signum:
            return 128 + self.signum
        if self.diverged:
            return EXIT_DIVERGED
        return next((code for code in codes if code), 0) if failure is None else failure[0]

    def _watch(self) -> None:
        """While no stop is under way: the hang watch, then the divergence check."""
        if self.watch is not None and self.watch.check():
            self._stop_hung()
        elif self.divergence is not None and (text := self.divergence()):
            self.diverged = text
            self._terminate(f"{text}: stopping the job (spec.divergence.policy stop)")

    def _stop_hung(self) -> None:
        """A hung job cannot write a stop checkpoint (its ranks wait in a collective): kill it at once."""
        print("kubetrain run: stopping the hung job (SIGKILL: a rank stuck in a collective cannot checkpoint)",
              file=self.err, flush=True)
        self.hung = True
        self._kill_all()

    def _workers_gone(self) -> bool:
        """Whether no running agent has a worker left. Such an agent only waits in torchrun's exit barrier
        for the failed node, which never comes: up to 300 s, in a blocking store call that a SIGTERM does
        not interrupt."""
        running = [proc.pid for proc in self.procs if proc.poll() is None]
        return all(has_no_children(pid) for pid in running)

    def _stop_idle(self, code: int) -> None:
        print(f"kubetrain run: a node exited with {code}; the other nodes have no worker left: stopping them",
              file=self.err, flush=True)
        self._kill_all()

    def _terminate(self, reason: str) -> None:
        print(f"kubetrain run: {reason}", file=self.err, flush=True)
        self.stop_deadline = time.monotonic() + self.plan.stop_grace_seconds
        self._signal_agents(signal.SIGTERM)

    def _signal_agents(self, signum: int) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signum)

    def _kill_all(self) -> None:
        if any(proc.poll() is None for proc in self.procs):
            self._signal_agents(signal.SIGKILL)
            self._kill_leftovers()
            for proc in self.procs:
                proc.wait()

    def _kill_leftovers(self) -> None:
        pids = [pid for pid in processes_of_run(self.plan.run_id) if not is_store(pid)]  # it ends on release
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
        if pids:
            print(f"kubetrain run: killed {len(pids)} leftover process(es) of the run", file=self.err,
                  flush=True)

    # --- signals --------------------------------------------------------------------------------------
    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {signum: signal.signal(signum, self._on_signal) for signum in HANDLED_SIGNALS}

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum:
            self.force = True  # a second Ctrl-C: no more waiting
        else:
            self.signum = signum
