"""The TrainingJob's status, mirrored from its child (PyTorchJob or TrainJob). Pure functions."""

from __future__ import annotations

from typing import Any

from kubetrain import jobs
from kubetrain.controller.reconcile import Desired, now
from kubetrain.kube.objects import final_condition, meta_of, status_of

# TrainJob jobsStatus and PyTorchJob replicaStatuses both use these counters.
COUNTERS = ("active", "succeeded", "failed")


def condition(kind: str, true: bool, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": "True" if true else "False", "reason": reason, "message": message}


def child_conditions(child: dict[str, Any] | None, phase: str, queue: str | None,
                     queued: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Queued/Admitted (with a Kueue queue), Running, Succeeded, Failed: the child's state as conditions.
    `queued`: Queued/Admitted from the child's Kueue Workload (controller.kueue); without (no Workload API
    served) they follow the child's suspension."""
    out = list(queued or [])
    if queue and queued is None:
        waits = child is None or phase in ("Pending", "Created", "Suspended")
        out.append(condition("Queued", waits, "Suspended" if waits else "Admitted",
                             f"waiting in Kueue queue {queue}" if waits else ""))
        out.append(condition("Admitted", not waits, "Admitted" if not waits else "Waiting"))
    message = _terminal_message(child) if child else ""
    out.append(condition("Running", phase in ("Running", "Restarting"), phase))
    out.append(condition("Succeeded", phase == "Succeeded", phase, message if phase == "Succeeded" else ""))
    out.append(condition("Failed", phase == "Failed", phase, message if phase == "Failed" else ""))
    return out


def divergence_conditions(progress: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Diverged (True) while the progress read from rank 0's metrics lines says the loss became NaN or inf."""
    text = (progress or {}).get("diverged")
    return [condition("Diverged", True, "NonFiniteLoss", str(text))] if text else []


def with_divergence(status: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """The status with its Diverged condition, for a progress read after the conditions were computed (the
    final read when the child ends)."""
    conds = status.get("conditions") or []
    extra = [c for c in divergence_conditions(status.get("progress")) if c["type"] not in {x["type"] for x in conds}]
    if not extra:
        return status
    stamped = _keep_times(old.get("conditions") or [], extra, status.get("observedGeneration"))
    return {**status, "conditions": [*conds, *stamped]}


def _terminal_message(child: dict[str, Any]) -> str:
    final = final_condition(child) or {}
    return " ".join(str(final.get("message") or "").split())


def replicas(child: dict[str, Any]) -> dict[str, dict[str, int]]:
    status = status_of(child)
    if child.get("kind") == "TrainJob":
        groups = {str(s.get("name")): s for s in status.get("jobsStatus") or []}
    else:
        groups = dict(status.get("replicaStatuses") or {})
    return {name: {c: int(counts.get(c) or 0) for c in COUNTERS} for name, counts in groups.items()}


def times(child: dict[str, Any]) -> dict[str, str]:
    status = status_of(child)
    start = status.get("startTime") or meta_of(child).get("creationTimestamp")
    end = status.get("completionTime")
    if not end and jobs.state(child) in jobs.TERMINAL:
        end = (final_condition(child) or {}).get("lastTransitionTime")
    return {k: v for k, v in (("startTime", start), ("completionTime", end)) if v}


def status_for(obj: dict[str, Any], want: Desired, child: dict[str, Any] | None,
               extra: list[dict[str, Any]], queued: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The whole status: phase, conditions, replica counts, times, children, observedGeneration."""
    old = status_of(obj)
    generation = meta_of(obj).get("generation")
    kept = old.get("progress")
    if not (kept and child and str(kept.get("updateTime") or "") >= times(child)["startTime"]):
        kept = None  # read from an earlier child: not this one's progress
    if want.problems:
        phase = "Invalid"
        conds = [condition("Valid", False, "InvalidSpec", "; ".join(want.problems))]
    else:
        phase = jobs.state(child) if child else "Pending"
        queue = want.job.spec.scheduling.queue if want.job else None
        conds = [condition("Valid", True, "Rendered"), *child_conditions(child, phase, queue, queued),
                 *divergence_conditions(kept)]
    status: dict[str, Any] = {"phase": phase, "observedGeneration": generation,
                              "conditions": _keep_times(old.get("conditions") or [], [*conds, *extra], generation)}
    if want.target:
        status["target"] = want.target
    if child:
        meta = child["metadata"]
        status.update(replicas=replicas(child), specHash=want.spec_hash or old.get("specHash"), **times(child),
                      children=[{"apiVersion": child["apiVersion"], "kind": child["kind"], "name": meta["name"]}])
    if kept:
        status["progress"] = kept
    return {k: v for k, v in status.items() if v is not None}


def _keep_times(old: list[dict[str, Any]], new: list[dict[str, Any]], generation: int | None
                ) -> list[dict[str, Any]]:
    """lastTransitionTime changes only when a condition's status does (as Kubernetes conditions do)."""
    before = {c.get("type"): c for c in old}
    out = []
    for cond in new:
        prior = before.get(cond["type"])
        same = prior is not None and prior.get("status") == cond["status"]
        stamp = prior.get("lastTransitionTime") if same and prior else now()
        out.append({**cond, "lastTransitionTime": stamp, "observedGeneration": generation})
    return out


def transitions(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type Normal|Warning, reason, message) for each Event a status change deserves."""
    events = []
    first = not old.get("phase") and new.get("phase") in ("Pending", "Created")  # the Created Event says it
    if old.get("phase") != new.get("phase") and not first:
        warning = new["phase"] in ("Failed", "Invalid")
        detail = next((c["message"] for c in new["conditions"] if c["status"] == "True" and c["message"]
                       and c["type"] in ("Failed", "Succeeded")), "")
        if new["phase"] == "Invalid":
            detail = next(c["message"] for c in new["conditions"] if c["type"] == "Valid")
        events.append(("Warning" if warning else "Normal", new["phase"],
                       f"phase {old.get('phase') or 'none'} → {new['phase']}" + (f": {detail}" if detail else "")))
    was = {c.get("type"): c.get("status") for c in old.get("conditions") or []}
    for cond in new.get("conditions") or []:
        if cond["type"] == "SpecChanged" and cond["status"] == "True" and was.get("SpecChanged") != "True":
            events.append(("Warning", cond["reason"], cond["message"]))
        if cond["type"] == "Diverged" and cond["status"] == "True" and was.get("Diverged") != "True":
            events.append(("Warning", "Diverged", cond["message"]))
    return events
