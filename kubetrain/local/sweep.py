"""`kubetrain sweep run`: a sweep's trials on this machine, each one a `kubetrain run` of the trial's spec, N at a
time, decided by the search engine (kubetrain.sweeps.engine) from the trials' metrics lines.

* Each trial is `python -m kubetrain run -f - --raw` in a session of its own, its spec on stdin, so it is run by
  exactly the machinery of `kubetrain run` (torchrun agents, rendezvous store, clean stop, no orphan).
* Every process of a trial inherits KUBETRAIN_SWEEP_TRIAL=<trial name>. A pruned or stopped trial gets SIGTERM
  (`kubetrain run` stops its agents as on Ctrl-C); after STOP_GRACE_SECONDS it and every process still carrying
  the trial's name get SIGKILL.
* The volume that holds spec.checkpoint.dir is a directory of the trial's own under the sweep's directory, so
  no trial resumes another's (or an earlier sweep's) checkpoint; other volumes (datasets) are shared.
* The state (kubetrain.sweeps.state) is written to `<sweep dir>/state.json` after every change, for
  `kubetrain sweep best` and the table.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from kubetrain.errors import KubetrainError
from kubetrain.jobspec.load import LoadedSpec
from kubetrain.local.supervisor import processes_with_env
from kubetrain.metrics import parse_metrics_line
from kubetrain.sweeps.engine import Engine
from kubetrain.sweeps.state import SweepState, SweepStateError, Trial
from kubetrain.sweeps.trial import trial_document, trial_job, trial_name

TRIAL_ENV = "KUBETRAIN_SWEEP_TRIAL"
STOP_GRACE_SECONDS = 10.0
POLL_SECONDS = 0.2
STATE_FILE = "state.json"
SWEEPS_DIR = ".kubetrain/sweeps"


class SweepRunError(KubetrainError):
    """A local sweep cannot start or its state cannot be read."""

    exit_code = 2


def sweep_dir(loaded: LoadedSpec) -> Path:
    """Where a local sweep keeps its state and its trials' logs and checkpoints: beside the spec."""
    return loaded.base_dir / SWEEPS_DIR / loaded.job.metadata.name


def read_state(loaded: LoadedSpec) -> SweepState:
    """The saved state of the spec's last local sweep."""
    path = sweep_dir(loaded) / STATE_FILE
    try:
        return SweepState.from_json(path.read_text())
    except FileNotFoundError:
        raise SweepRunError(f"{path}: no sweep has run for {loaded.job.metadata.name} here "
                            "(run `kubetrain sweep run` first)") from None
    except SweepStateError as exc:
        raise SweepRunError(f"{path}: {exc}") from None


@dataclass
class Running:
    """A trial's `kubetrain run` process and what its output said so far."""

    trial: Trial
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    reader: threading.Thread
    stop_deadline: float | None = None
    stop_started: float | None = None


class LocalSweep:
    """Runs a spec's sweep to its end; `changed(state)` after every change, `notify(line)` for each event."""

    def __init__(self, loaded: LoadedSpec, changed: Callable[[SweepState], None],
                 notify: Callable[[str], None], python: str = sys.executable) -> None:
        assert loaded.job.sweep is not None
        self.loaded = loaded
        self.sweep = loaded.job.sweep
        self.engine = Engine(self.sweep)
        self.changed = changed
        self.notify = notify
        self.python = python
        self.dir = sweep_dir(loaded)
        self.state = SweepState()
        self.running: dict[int, Running] = {}
        self.events: queue.Queue[tuple[int, dict[str, Any]]] = queue.Queue()

    # --- the loop ---------------------------------------------------------------------------------------------
    def run(self) -> SweepState:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.state.started = time.time()
        try:
            while self._step():
                self.changed(self.state)
                self._wait_for_output()
        except KeyboardInterrupt:
            self.notify("sweep: interrupted: stopping every trial")
            for running in list(self.running.values()):
                self._stop(running, "stopped")
            while self.running:
                self._reap()
                self._enforce_deadlines()
                time.sleep(POLL_SECONDS)
            raise
        finally:
            self._save()
            self.changed(self.state)
        return self.state

    def _step(self) -> bool:
        """One round: read metrics, end finished trials, start new ones. False when the sweep is over."""
        self._drain()
        self._reap()
        self._enforce_deadlines()
        now = time.time()
        if self.engine.out_of_time(self.state, now):
            for running in list(self.running.values()):
                if running.stop_deadline is None:
                    self.notify(f"sweep: budget.maxSeconds reached: stopping trial {running.trial.number}")
                    self._stop(running, "stopped")
        while len(self.running) < self.sweep.parallelism:
            trial = self.engine.suggest(self.state, now)
            if trial is None:
                break
            self._start(trial)
        return bool(self.running)

    def _wait_for_output(self) -> None:
        with contextlib.suppress(queue.Empty):
            self._record(*self.events.get(timeout=POLL_SECONDS))

    # --- metrics ----------------------------------------------------------------------------------------------
    def _drain(self) -> None:
        while True:
            try:
                number, record = self.events.get_nowait()
            except queue.Empty:
                return
            self._record(number, record)

    def _record(self, number: int, record: dict[str, Any]) -> None:
        running = self.running.get(number)
        if running is None or running.trial.state != "running":
            return
        trial = running.trial
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            return
        trial.step = max(trial.step or 0, step)
        if isinstance(record.get("total_steps"), int):
            trial.total_steps = record["total_steps"]
        value = record.get(self.sweep.objective.metric)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return
        self.engine.report(self.state, number, step, float(value))
        if self.engine.should_prune(self.state, number):
            self.notify(f"sweep: trial {number} pruned at step {step} "
                        f"({self.sweep.objective.metric} {value:.4g}): stopping its processes")
            self._stop(running, "pruned")
        self._save()

    # --- processes --------------------------------------------------------------------------------------------
    def _start(self, trial: Trial) -> None:
        name = trial_name(self.loaded.job.metadata.name, trial.number)
        trial.started = time.time()
        try:
            trial_job(self.loaded.job, trial.params, trial.number, f"trial {trial.number}")
        except KubetrainError as exc:
            self.notify(f"sweep: trial {trial.number} {trial.params}: {exc}")
            self.engine.finish(self.state, trial.number, "failed", time.time())
            return
        text = yaml.safe_dump(trial_document(self.loaded.job, trial.params, trial.number), sort_keys=False)
        workdir = self.dir / trial.name_suffix
        workdir.mkdir(parents=True)
        argv = [self.python, "-m", "kubetrain", "run", "-f", "-", "--raw", *self._volume_flags(workdir)]
        log = (workdir / "output.log").open("wb")
        proc = subprocess.Popen(argv, cwd=self.loaded.base_dir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=log, start_new_session=True, env={**os.environ, TRIAL_ENV: name})
        assert proc.stdin is not None
        proc.stdin.write(text.encode())
        proc.stdin.close()
        reader = threading.Thread(target=self._read, args=(trial.number, proc, log), daemon=True)
        reader.start()
        self.running[trial.number] = Running(trial, proc, log, reader)
        self.notify(f"sweep: trial {trial.number} started: {trial.params}")
        self._save()

    def _volume_flags(self, workdir: Path) -> list[str]:
        """`--volume NAME=DIR` giving the checkpoint's volume a directory of the trial's own."""
        spec = self.loaded.job.spec
        ckpt = spec.checkpoint.dir or ""
        return [flag for volume in spec.volumes
                if ckpt == volume.mountPath or ckpt.startswith(volume.mountPath.rstrip("/") + "/")
                for flag in ("--volume", f"{volume.name}={workdir / 'volumes' / volume.name}")]

    def _read(self, number: int, proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            log.write(raw)
            record = parse_metrics_line(raw.decode("utf-8", "replace"))
            if record is not None:
                self.events.put((number, record))

    def _reap(self) -> None:
        for number, running in list(self.running.items()):
            code = running.proc.poll()
            if code is None:
                continue
            running.reader.join(timeout=5)
            self._drain()
            self._kill_leftovers(running)
            running.log.close()
            del self.running[number]
            trial = running.trial
            if running.stop_started is not None:
                self.notify(f"sweep: trial {number} {trial.state}: its processes ended "
                            f"{time.monotonic() - running.stop_started:.1f} s after SIGTERM")
            if trial.state == "running":
                outcome = "complete" if code == 0 else "failed"
                self.engine.finish(self.state, number, outcome, time.time())
                ending = f"{self.sweep.objective.metric} {trial.value:.4g}" if trial.value is not None else (
                    f"exit code {code}, see {self.dir / trial.name_suffix / 'output.log'}" if code else
                    f"never reported {self.sweep.objective.metric}")
                self.notify(f"sweep: trial {number} {trial.state}: {ending}")
            self._save()

    def _stop(self, running: Running, outcome: str) -> None:
        """SIGTERM to the trial's `kubetrain run` (it stops its agents); SIGKILL after the grace period."""
        self.engine.finish(self.state, running.trial.number, outcome, time.time())
        running.stop_started = time.monotonic()
        running.stop_deadline = running.stop_started + STOP_GRACE_SECONDS
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(running.proc.pid, signal.SIGTERM)

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for running in self.running.values():
            if running.stop_deadline is not None and now >= running.stop_deadline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(running.proc.pid, signal.SIGKILL)
                self._kill_leftovers(running)

    def _kill_leftovers(self, running: Running) -> None:
        name = trial_name(self.loaded.job.metadata.name, running.trial.number)
        for pid in processes_with_env(TRIAL_ENV, name):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def _save(self) -> None:
        path = self.dir / STATE_FILE
        temp = path.with_suffix(".tmp")
        temp.write_text(self.state.to_json())
        temp.replace(path)
