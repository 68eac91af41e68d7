"""Sweeps in the cluster: a Sweep's trials are TrainingJobs it owns, decided by the search engine from the state
kept in the Sweep's status.

One reconcile reads the trials' TrainingJobs from the informer's cache, feeds their objective values to the
engine (kubetrain.sweeps.engine), ends, prunes or starts trials, writes the whole state to status.state and only
then acts: creates the running trials' TrainingJobs that do not exist (the name is the trial's number, a second
create is AlreadyExists) and deletes those of pruned and stopped trials. A controller that dies anywhere in
between finds the same decisions in the status after its restart: no trial is lost or started twice. Only the
Lease holder runs a controller at all, so every decision is made once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from kubetrain.controller import kube
from kubetrain.controller.crd import PLURAL as TJ_PLURAL
from kubetrain.controller.informer import Informer, Key
from kubetrain.errors import SpecError
from kubetrain.jobspec.model import TrainingJob
from kubetrain.kube.errors import Conflict
from kubetrain.kube.objects import TRIAL_LABEL, meta_of, status_of
from kubetrain.kube.rest import Rest, path_of
from kubetrain.sweeps.engine import Engine
from kubetrain.sweeps.resource import GROUP, PLURAL, VERSION, load_sweep, sweep_of, trial_resource
from kubetrain.sweeps.state import SweepState, Trial

log = logging.getLogger("kubetrain.controller")
ENDED = {"Succeeded": "complete", "Failed": "failed", "Invalid": "failed"}
GONE = ("pruned", "stopped")  # trials whose TrainingJob the controller deletes


class SweepReconciler:
    """Reconciles Sweeps (one key at a time: its queue has one worker)."""

    def __init__(self, rest: Rest, sweeps: Informer, jobs: Informer,
                 record: Callable[[dict[str, Any], str, str, str], None]) -> None:
        self.rest, self.sweeps, self.jobs, self.record = rest, sweeps, jobs, record
        self.written: dict[str, dict[str, Any]] = {}  # uid → status we last wrote (the cache may lag behind)

    def reconcile(self, key: Key) -> None:
        obj = self.sweeps.get(key)
        if obj is None or meta_of(obj).get("deletionTimestamp"):
            return  # the garbage collector deletes the trials (controller ownerReferences)
        uid = str(obj["metadata"]["uid"])
        previous = self.written.get(uid) or status_of(obj)
        try:
            job = load_sweep(obj)
        except SpecError as exc:
            self._write(obj, previous, {**previous, "phase": "Invalid", "message": str(exc),
                                        "observedGeneration": obj["metadata"].get("generation")})
            return
        assert job.sweep is not None
        engine = Engine(job.sweep)
        state = SweepState.from_dict(previous["state"]) if previous.get("state") else SweepState(started=time.time())
        trials = self._trials(key, uid)
        stop = bool((obj.get("spec") or {}).get("stop"))
        self._observe(engine, state, trials, stop)
        if not stop:
            while len(state.running()) < job.sweep.parallelism and engine.suggest(state, time.time()):
                pass
        self._write(obj, previous, self._status(obj, engine, state, stop))
        self._act(obj, job, state, trials)

    def _trials(self, key: Key, uid: str) -> dict[int, dict[str, Any]]:
        """The sweep's trials' TrainingJobs in the cache, by trial number (ours only: owned by this Sweep)."""
        found: dict[int, dict[str, Any]] = {}
        for job in self.jobs.items():
            meta = meta_of(job)
            owners = {ref.get("uid") for ref in meta.get("ownerReferences") or []}
            number = (meta.get("labels") or {}).get(TRIAL_LABEL, "")
            if sweep_of(job) == key and uid in owners and number.isdigit():
                found[int(number)] = job
        return found

    def _observe(self, engine: Engine, state: SweepState, trials: dict[int, dict[str, Any]], stop: bool) -> None:
        now = time.time()
        for trial in state.running():
            if stop or engine.out_of_time(state, now):
                engine.finish(state, trial.number, "stopped", now)
            elif (job := trials.get(trial.number)) is not None:
                self._follow(engine, state, trial, job, now)

    def _follow(self, engine: Engine, state: SweepState, trial: Trial, job: dict[str, Any], now: float) -> None:
        """A running trial's step and objective values from its TrainingJob's status; its end or its pruning."""
        status = status_of(job)
        progress, objective = status.get("progress") or {}, status.get("objective") or {}
        if isinstance(step := progress.get("step", objective.get("step")), int):
            trial.step, trial.total_steps = step, progress.get("totalSteps")
        fresh = False
        for step, value in objective.get("intermediate") or []:
            if int(step) not in trial.intermediate:
                engine.report(state, trial.number, int(step), float(value))
                fresh = True
        if (outcome := ENDED.get(str(status.get("phase")))) is not None:
            engine.finish(state, trial.number, outcome, now)
        elif fresh and engine.should_prune(state, trial.number):
            engine.finish(state, trial.number, "pruned", now)

    def _status(self, obj: dict[str, Any], engine: Engine, state: SweepState, stop: bool) -> dict[str, Any]:
        running = state.running()
        best = engine.best(state)
        if running:
            phase = "Stopping" if stop else "Running"
        elif stop:
            phase = "Stopped"
        else:
            phase = "Succeeded" if best is not None else "Failed"
        counts = {s: state.count(s) for s in ("running", "complete", "pruned", "failed", "stopped")}
        return {"phase": phase, "observedGeneration": obj["metadata"].get("generation"),
                "trials": {"total": len(state.trials), **counts},
                "completed": f"{counts['complete']}/{engine.sweep.trial_count}",
                "best": {"trial": best.number, "value": best.value, "params": best.params} if best else None,
                "state": state.to_dict()}

    def _write(self, obj: dict[str, Any], previous: dict[str, Any], status: dict[str, Any]) -> None:
        if {k: v for k, v in status.items() if v is not None} == previous:
            return
        meta = obj["metadata"]
        patch = {**{k: None for k in previous if k not in status}, **status}
        self.rest.json("PATCH", path_of(GROUP, VERSION, PLURAL, meta["namespace"], meta["name"]) + "/status",
                      body={"status": patch}, content_type="application/merge-patch+json")
        self.written[str(meta["uid"])] = {k: v for k, v in status.items() if v is not None}
        if status.get("phase") != previous.get("phase"):
            self.record(obj, "Normal", f"Sweep{status['phase']}", _phase_message(status))

    def _act(self, obj: dict[str, Any], job: TrainingJob, state: SweepState, trials: dict[int, dict[str, Any]]) -> None:
        """What the written state decided: running trials' TrainingJobs exist, pruned and stopped ones' do not."""
        for trial in state.trials:
            existing = trials.get(trial.number)
            if trial.state == "running" and existing is None:
                self._create(obj, trial_resource(job, obj, trial.number, trial.params))
            elif trial.state in GONE and existing is not None and not meta_of(existing).get("deletionTimestamp"):
                kube.delete_child(self.rest, existing, TJ_PLURAL)
                self.record(obj, "Normal", "TrialDeleted" if trial.state == "stopped" else "TrialPruned",
                            f"trial {trial.number} {trial.state}: deleted TrainingJob {existing['metadata']['name']}")

    def _create(self, obj: dict[str, Any], trial: dict[str, Any]) -> None:
        meta = trial["metadata"]
        with contextlib.suppress(Conflict):  # created before a restart: the same name, the same trial
            self.rest.json("POST", path_of(GROUP, VERSION, TJ_PLURAL, meta["namespace"]), body=trial)
            self.record(obj, "Normal", "TrialCreated", f"created TrainingJob {meta['name']}")
            log.info("sweep %s/%s: created trial %s", meta["namespace"], obj["metadata"]["name"], meta["name"])


def _phase_message(status: dict[str, Any]) -> str:
    best = status.get("best")
    text = f"sweep {status['phase'].lower()}: {status.get('completed', '')} trials complete"
    return text + (f", best trial {best['trial']} ({best['value']:.6g})" if best else "")
