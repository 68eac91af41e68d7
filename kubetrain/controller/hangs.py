"""Hung and Straggler conditions on running TrainingJobs, and spec.hang.policy `restart` in the cluster.

Every `interval` seconds, for each Running TrainingJob: one pod list (the controller's REST client) and one
exec per running pod of the read-only probe `kubetrain status --hang` runs (kubetrain.jobs.stacks: the ranks'
progress records and /proc states; nothing is signalled), judged with the TrainingJob's own spec.hang
(kubetrain.observe.hang). The verdict becomes the Hung and Straggler conditions (written by the reconcile, the
one writer of status.conditions) and an Event on each change. With policy restart, a hung job's pods are
deleted, at most maxRestarts times (status.hang counts them): the training operator creates them again and
the runtime resumes from the newest complete checkpoint.

When a job becomes hung, the controller asks once more with the full probe of `kubetrain stacks` (every rank's
stack, torch's flight recorder), which also copies the evidence onto the checkpoint volume
(`<spec.checkpoint.dir>/hangs/hang-<time>-<pod>/`) before any restart takes the pods' /tmp away.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kubetrain.controller import kube
from kubetrain.controller.faults import ErrorCounter, Fanout
from kubetrain.controller.informer import Informer, Key
from kubetrain.controller.mirror import condition
from kubetrain.controller.nodeloss import NodeWatch
from kubetrain.controller.reconcile import now
from kubetrain.jobs import targets
from kubetrain.jobs.crud import TERMINAL
from kubetrain.jobs.pods import Replica, job_replicas
from kubetrain.jobs.stacks import JobStacks, ask_pods, combine, exec_probe, exec_records, exec_saving
from kubetrain.jobspec.model import TrainingJob
from kubetrain.kube import watch
from kubetrain.kube.objects import status_of
from kubetrain.kube.rest import Rest
from kubetrain.observe.hang import Thresholds
from kubetrain.observe.stacks import describe_silent

log = logging.getLogger("kubetrain.controller")
TYPES = ("Hung", "Straggler")
WATCHED_PHASES = ("Running", "Restarting")
RESTART_GRACE_SECONDS = 5  # a rank stuck in a collective cannot save anything: no point waiting longer


@dataclass(frozen=True)
class Verdict:
    """One read of a job's ranks, as conditions."""

    hung: bool
    message: str  # the one-line verdict when hung; else the phase, threshold and ranks that cannot run
    stragglers: tuple[str, ...]
    step: int

    def conditions(self) -> list[dict[str, Any]]:
        return [condition("Hung", self.hung, "Hung" if self.hung else "Progressing", self.message),
                condition("Straggler", bool(self.stragglers), "Straggler" if self.stragglers else "NoStraggler",
                          "; ".join(self.stragglers))]


def verdict_of(report: JobStacks) -> Verdict | None:
    """None when no pod has a rank record (not started yet, or a script without kubetrain.runtime)."""
    if not report.has_ranks:
        return None
    a = report.assessment
    if a.hung:
        message = report.headline() + (f"; {report.flight}" if report.flight else "")
    else:  # no step number: the condition (and the status) changes only when the judgement does
        silent = "; ".join(describe_silent(s) for s in report.stacks if not s.answered)
        message = f"progressing: phase {a.phase}, threshold {a.limit:.0f} s" + (f"; cannot run: {silent}" if silent
                                                                                 else "")
    return Verdict(a.hung, message, tuple(s.describe() for s in a.stragglers), a.step)


def _plain(conds: list[dict[str, Any]]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c.get("message") or "") for c in conds if c["type"] in TYPES}


def transitions(before: list[dict[str, Any]], after: Verdict, saved: list[str] | None = None
                ) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events a change of verdict deserves; `saved`: where the evidence went."""
    was = {k: v[0] for k, v in _plain(before).items()}
    events = []
    if after.hung and was.get("Hung") != "True":
        events.append(("Warning", "Hung", after.message + (f"; evidence saved in {', '.join(saved)}" if saved else "")))
    if not after.hung and was.get("Hung") == "True":
        events.append(("Normal", "Progressing", f"progress resumed at step {after.step:,}"))
    if after.stragglers and was.get("Straggler") != "True":
        events.append(("Warning", "Straggler", "; ".join(after.stragglers)))
    if not after.stragglers and was.get("Straggler") == "True":
        events.append(("Normal", "NoStraggler", "no rank straggles any more"))
    return events


def carried(old: dict[str, Any], latest: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Hung/Straggler for the reconcile: the latest read's, else those already on the object (a restarted
    controller keeps them until its first read)."""
    if latest is not None:
        return latest
    return [condition(c["type"], c.get("status") == "True", str(c.get("reason") or ""), str(c.get("message") or ""))
            for c in old.get("conditions") or [] if c.get("type") in TYPES]


@dataclass
class ClusterHangWatch:
    """The periodic reader; `conditions[key]` is what the reconcile writes (see Controller.reconcile)."""

    rest: Rest  # the one client: pod lists, pods/exec, pod deletes
    jobs: Informer
    spec_of: Callable[[dict[str, Any]], TrainingJob | None]
    record: Callable[[dict[str, Any], str, str, str], None]  # an Event
    enqueue: Callable[[Key], None]
    conditions: dict[Key, list[dict[str, Any]]] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)  # uid → restarts done (the cache may lag behind)
    refused: dict[str, int] = field(default_factory=dict)  # uid → restarts done when the budget was found spent
    errors: ErrorCounter = field(default_factory=ErrorCounter)
    parallel: int = 8  # jobs checked at once
    rounds: int = 0
    execs: int = 0
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self.fanout: Fanout[bool] = Fanout("hang", self.errors, self.parallel)
        self.nodes = NodeWatch(self.rest, self.record, self.enqueue)  # NodeLost, from the same pod lists

    def run(self, stop: threading.Event, interval: float) -> None:
        while not stop.wait(interval):
            try:
                self.round()
            except Exception as exc:  # the round's own bookkeeping: never the end of the hang watch
                self.errors.record("hang", ("*", "round"), exc)
        self.fanout.close()

    def round(self) -> int:
        """Read every watched job once, concurrently (a stuck pod delays only its own job; a pod that just
        went away or a refused exec is counted and tried again next round); returns how many were judged."""
        began = time.monotonic()
        items = self.jobs.items()
        for gone in (set(self.conditions.copy()) | set(self.nodes.conditions.copy())) - {watch.key(o) for o in items}:
            self.conditions.pop(gone, None)
            self.nodes.forget(gone)
        judged = sum(self.fanout.run([(watch.key(o), functools.partial(self.check, o)) for o in items]))
        self.rounds += 1
        self.seconds += time.monotonic() - began
        return judged

    def check(self, obj: dict[str, Any]) -> bool:
        key = watch.key(obj)
        status = status_of(obj)
        target = targets.TARGETS.get(str(status.get("target")))
        job = self.spec_of(obj) if status.get("phase") in WATCHED_PHASES and target else None
        if job is None or target is None:
            if status.get("phase") in TERMINAL or not target:  # else (e.g. Created again) the verdict is kept
                self.ended(obj, self.conditions.pop(key, None))
                self.nodes.forget(key)
            return False
        meta = obj["metadata"]
        replicas = [r for r in job_replicas(self.rest, target, meta["namespace"], meta["name"]) if not r.deleting]
        self.nodes.check(obj, replicas)  # before the execs, which wait out a down node's kubelet
        running = [r for r in replicas if r.phase == "Running" and r.state == "running"]
        if not running:
            return False
        self.execs += len(running)
        thresholds = Thresholds.from_spec(job.spec.hang)
        pods = ask_pods(self.rest, meta["namespace"], meta["name"], running, exec_records)
        verdict = verdict_of(combine(meta["name"], pods, asked=False, thresholds=thresholds))
        if verdict is None:
            return False
        before = self.conditions.get(key) or carried(status, None)
        hung_before = _plain(before).get("Hung")
        saved: list[str] = []
        if verdict.hung and hung_before and hung_before[0] == "True":
            verdict = replace(verdict, message=hung_before[2])  # the same hang: its first, fuller verdict stays
        elif verdict.hung:
            verdict, saved = self.evidence(obj, job, running, thresholds, verdict)
        for kind, reason, message in transitions(before, verdict, saved):
            log.info("hang watch: %s/%s: %s: %s", meta["namespace"], meta["name"], reason, message)
            self.record(obj, kind, reason, message)
        latest = verdict.conditions()
        self.conditions[key] = latest
        if _plain(latest) != _plain(before):
            self.enqueue(key)
        if verdict.hung and job.spec.hang.policy == "restart" and len(running) == len(replicas):
            self.restart(obj, replicas, verdict, job.spec.hang.maxRestarts)
        return True

    def ended(self, obj: dict[str, Any], last: list[dict[str, Any]] | None) -> None:
        """A job that ends while last judged hung (a restarted job can finish between two rounds) gets the
        closing Event: its status drops the Hung condition with the Running phase."""
        phase = status_of(obj).get("phase")
        if phase in TERMINAL and last and _plain(last).get("Hung", ("",))[0] == "True":
            meta = obj["metadata"]
            message = f"no longer hung: the job {phase}"
            log.info("hang watch: %s/%s: Progressing: %s", meta["namespace"], meta["name"], message)
            self.record(obj, "Normal" if phase == "Succeeded" else "Warning", "Progressing", message)

    def evidence(self, obj: dict[str, Any], job: TrainingJob, running: list[Replica], thresholds: Thresholds,
                 verdict: Verdict) -> tuple[Verdict, list[str]]:
        """On a new hang: every rank's stack and flight recorder (the probe of `kubetrain stacks`), copied to
        `<spec.checkpoint.dir>/hangs` in each pod when that is a path (a volume). Returns the fuller verdict
        (unless the job progressed meanwhile) and where the evidence was saved."""
        meta = obj["metadata"]
        directory = job.spec.checkpoint.dir or ""
        run = exec_saving(directory.rstrip("/") + "/hangs") if directory.startswith("/") else exec_probe
        self.execs += len(running)
        pods = ask_pods(self.rest, meta["namespace"], meta["name"], running, run)
        full = verdict_of(combine(meta["name"], pods, asked=True, thresholds=thresholds))
        saved = [str(p.answer["saved"]) for p in pods if p.answer and p.answer.get("saved")]
        return (full if full is not None and full.hung else verdict), saved

    def restart(self, obj: dict[str, Any], replicas: list[Replica], verdict: Verdict, budget: int) -> None:
        """Delete every pod of the hung job (the others wait in a collective the stuck rank never joins);
        the training operator creates them again, and the ranks resume from the newest checkpoint."""
        meta = obj["metadata"]
        done = max(self.restarts.get(meta["uid"], 0), int((status_of(obj).get("hang") or {}).get("restarts") or 0))
        if done >= budget:
            if self.refused.get(meta["uid"]) != done:  # once, not every round
                self.refused[meta["uid"]] = done
                self.record(obj, "Warning", "HangRestartBudget",
                            f"hung again after {done} restart(s) (spec.hang.maxRestarts {budget}): not restarting; "
                            "the process-group timeout ends the job")
            return
        self.restarts[meta["uid"]] = done + 1
        self.record(obj, "Warning", "HangRestart",
                    f"restart {done + 1} of {budget} at step {verdict.step:,}: deleting the {len(replicas)} pods "
                    "of the job; the ranks resume from the newest checkpoint")
        kube.patch_status(self.rest, meta["namespace"], meta["name"],
                          {"hang": {"restarts": done + 1, "lastRestartTime": now(), "lastRestartStep": verdict.step}})
        for replica in replicas:
            kube.delete_pod(self.rest, meta["namespace"], replica.pod, RESTART_GRACE_SECONDS)
