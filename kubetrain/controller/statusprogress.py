"""Live progress of running TrainingJobs: the tail of rank 0's log, parsed like `kubetrain logs -f` does.

Bounded cost per running job and interval: one pod list and one log read of at most `tail` lines and
LIMIT_BYTES bytes, then one status patch if the progress changed. Never the whole log, never a stream. The
jobs of a round are read concurrently (controller.faults.Fanout): a pod on a stuck node delays only its own
job, whose read gives up after kube.KUBELET_TIMEOUT; a job deleted meanwhile is counted, never fatal.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from kubetrain.controller import kube
from kubetrain.controller.faults import Fanout
from kubetrain.controller.informer import Informer
from kubetrain.controller.reconcile import now
from kubetrain.jobs import pods, targets
from kubetrain.kube.objects import OBJECTIVE_ANNOTATION, meta_of, status_of
from kubetrain.kube.rest import Rest
from kubetrain.metrics import parse_metrics_line
from kubetrain.observe.progress import ProgressTracker, format_duration

log = logging.getLogger("kubetrain.controller")
LIMIT_BYTES = 256 * 1024
MAX_INTERMEDIATE = 500  # objective values kept by step (a trial's early stopping compares them)


def progress_of(lines: list[str]) -> dict[str, Any] | None:
    """status.progress from log lines (None when they hold no metrics)."""
    return _progress(_fed(lines))


def tracking_of(runs: dict[str, str]) -> dict[str, Any] | None:
    """status.tracking from the runs' pages of `tracking` metrics records (None without one)."""
    if not runs:
        return None
    first = next((runs[name] for name in ("mlflow", "wandb") if name in runs), next(iter(runs.values())))
    return {"runURL": first, "runs": dict(sorted(runs.items()))}


def _fed(lines: list[str]) -> ProgressTracker:
    tracker = ProgressTracker()
    for line in lines:
        tracker.feed(line)
    return tracker


def _progress(tracker: ProgressTracker) -> dict[str, Any] | None:
    value = (tracker.eval or {}).get("eval_accuracy")
    accuracy = float(value) if isinstance(value, int | float) else None
    record = tracker.last
    if record is None:
        return None
    step, total = record.get("step"), record.get("total_steps")
    rate = tracker.steps_per_second()
    out: dict[str, Any] = {"step": step, "totalSteps": total, "line": tracker.line(),
                           "stepText": f"{step}/{total}" if total else f"{step}"}
    if isinstance(record.get("loss"), int | float) and tracker.diverged is None:
        out["loss"] = f"{record['loss']:.4f}"
    elif tracker.diverged is not None:
        out.update(loss=tracker.diverged[2] if tracker.diverged[1] == "loss" else None,
                   diverged=tracker.divergence())
    if isinstance(record.get("samples_per_s"), int | float):
        out["samplesPerSecond"] = round(float(record["samples_per_s"]), 1)
    if rate and isinstance(step, int) and isinstance(total, int) and total > step and not tracker.diverged:
        out["eta"] = format_duration((total - step) / rate)
    if accuracy is not None:
        out["evalAccuracy"] = accuracy
    return {k: v for k, v in out.items() if v is not None}


def objective_metric(obj: dict[str, Any]) -> str | None:
    """The metric a sweep's trial reports (its annotation), else None."""
    return (meta_of(obj).get("annotations") or {}).get(OBJECTIVE_ANNOTATION)


def objective_of(lines: list[str], metric: str, before: dict[str, Any] | None) -> dict[str, Any] | None:
    """status.objective of a sweep's trial: `metric`'s values by step in the metrics lines, added to those read
    before (a log tail holds only the latest ones), and the last value. None when it was never reported."""
    values = {int(step): float(value) for step, value in (before or {}).get("intermediate") or []}
    for line in lines:
        record = parse_metrics_line(line)
        value, step = (record or {}).get(metric), (record or {}).get("step")
        if isinstance(value, int | float) and not isinstance(value, bool) and isinstance(step, int):
            values[step] = float(value)
    if not values:
        return None
    steps = sorted(values)[-MAX_INTERMEDIATE:]
    return {"metric": metric, "step": steps[-1], "value": values[steps[-1]],
            "intermediate": [[step, values[step]] for step in steps]}


def read_tail(rest: Rest, target: targets.Target, namespace: str, name: str, tail: int) -> list[str]:
    """The last `tail` lines of the first replica's log (master-0 / node-0-0); [] before it started."""
    replicas = [r for r in pods.job_replicas(rest, target, namespace, name) if r.started]
    if not replicas:
        return []
    first = replicas[0]
    return kube.pod_log_tail(rest, namespace, first.pod, first.container, tail, LIMIT_BYTES)


def poll_once(rest: Rest, jobs: Informer, tail: int, fanout: Fanout[bool]) -> int:
    """Update status.progress of every Running TrainingJob, concurrently; returns how many were read."""
    calls = []
    for obj in jobs.items():
        status = status_of(obj)
        if status.get("phase") in ("Running", "Restarting") and status.get("target") in targets.TARGETS:
            meta = obj["metadata"]
            calls.append(((meta["namespace"], meta["name"]), functools.partial(poll_job, rest, obj, tail)))
    return sum(fanout.run(calls))


def poll_job(rest: Rest, obj: dict[str, Any], tail: int) -> bool:
    """One job's read (True) and, when its progress changed, its status patch. Raises on a failure (a pod
    gone since the list, the job deleted since the snapshot): the caller counts it."""
    status, meta = status_of(obj), obj["metadata"]
    lines = read_tail(rest, targets.TARGETS[status["target"]], meta["namespace"], meta["name"], tail)
    tracker = _fed(lines)
    progress = _progress(tracker)
    old = {k: v for k, v in (status.get("progress") or {}).items() if k != "updateTime"}
    patch: dict[str, Any] = {}
    if progress is not None and progress != old:
        removed = {k: None for k in old if k not in progress}  # a merge patch keeps keys it does not name
        patch["progress"] = {**removed, **progress, "updateTime": now()}
    tracking = tracking_of(tracker.runs)
    if tracking is not None and tracking != status.get("tracking"):  # kept: the record leaves the tail
        patch["tracking"] = tracking
    metric = objective_metric(obj)
    objective = objective_of(lines, metric, status.get("objective")) if metric else None
    if objective is not None and objective != status.get("objective"):
        patch["objective"] = objective
    if patch:
        kube.patch_status(rest, meta["namespace"], meta["name"], patch)
    return True
