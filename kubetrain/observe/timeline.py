"""Where the time of a job went: submitted → admitted → scheduled → image pulled → started → first step → done.

Pure: the callers collect the moments (Unix seconds) from what they have: `kubetrain run` from its own clock
and the metrics lines, `kubetrain status` from the job, its pods' conditions and Events, and the metrics in
rank 0's log. A phase nobody saw is left out; each shown phase carries the time since the previous one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kubetrain.kube.objects import final_condition, meta_of, parse_time, status_of
from kubetrain.observe.progress import ProgressTracker, format_duration

PHASES = ("submitted", "admitted", "scheduled", "image pulled", "started", "first step", "done")


def format_timeline(moments: dict[str, float | None]) -> str:
    """`submitted → scheduled +1s → first step +12s → done +3m02s (total 3m15s)`; "" with fewer than 2."""
    seen: list[tuple[str, float | None]] = []
    for phase in PHASES:
        when = moments.get(phase)
        # clocks of different machines (API server, node, this one) may disagree: never show time running back
        if when is not None and (not seen or when >= (seen[-1][1] or 0.0)):
            seen.append((phase, when))
    if len(seen) < 2:
        return ""
    parts, previous = [seen[0][0]], seen[0][1]
    for phase, when in seen[1:]:
        assert when is not None and previous is not None
        parts.append(f"{phase} +{_short(when - previous)}")
        previous = when
    first, last = seen[0][1], seen[-1][1]
    assert first is not None and last is not None
    return " → ".join(parts) + f" (total {_short(last - first)})"


def _short(seconds: float) -> str:
    """Sub-minute times with a decimal (local runs take seconds), longer ones as 3m02s."""
    return f"{max(0.0, seconds):.1f}s" if seconds < 60 else format_duration(seconds)


def metrics_moments(tracker: ProgressTracker) -> dict[str, float | None]:
    """started (the runtime's start record), first step (first train record) and done (end record)."""
    times = tracker.times
    return {"started": times.get("start"), "first step": times.get("train"), "done": times.get("end")}


def local_moments(tracker: ProgressTracker, submitted: float, ended: float | None) -> dict[str, float | None]:
    """`kubetrain run`: its own start, the metrics' moments, and its own end if the job printed none."""
    moments: dict[str, float | None] = {"submitted": submitted, **metrics_moments(tracker)}
    if moments["done"] is None:
        moments["done"] = ended
    return moments


def cluster_moments(job: dict[str, Any], pods: list[dict[str, Any]], events: list[dict[str, Any]],
                    tracker: ProgressTracker) -> dict[str, float | None]:
    """A job on a cluster: creation, Kueue admission, the first pod scheduled, the last image pulled, the
    metrics' moments; done is the job's Succeeded/Failed condition when there is no end record."""
    moments: dict[str, float | None] = {"submitted": _when(meta_of(job).get("creationTimestamp"))}
    moments["admitted"] = _first(_when(e.get("lastTimestamp") or e.get("eventTime")) for e in events
                                 if e.get("reason") == "Admitted")
    moments["scheduled"] = _first(_condition_time(p, "PodScheduled") for p in pods)
    moments["image pulled"] = None if any(_pulling(p) for p in pods) else _images_pulled(events)
    moments.update({k: v for k, v in metrics_moments(tracker).items() if v is not None})
    if moments.get("done") is None:
        final = final_condition(job)
        moments["done"] = _when(final.get("lastTransitionTime")) if final else None
    return moments


IMAGE_WAITING = {"ImagePullBackOff", "ErrImagePull", "ContainerCreating", "PodInitializing"}


def _pulling(pod: dict[str, Any]) -> bool:
    """A container of the pod still waits for its image (or was never started): the images are not all in."""
    status = pod.get("status") or {}
    return any(((c.get("state") or {}).get("waiting") or {}).get("reason") in IMAGE_WAITING
               and not c.get("restartCount")
               for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])])


def _images_pulled(events: list[dict[str, Any]]) -> float | None:
    """When the last container got its image: each container's first Pulled Event (a restarted container
    gets another, "already present on machine", which is not a pull of the job's start), the latest of them."""
    first: dict[tuple[str, str], float] = {}
    for event in events:
        if event.get("reason") != "Pulled":
            continue
        involved = event.get("involvedObject") or {}
        when = _when(event.get("firstTimestamp") or event.get("eventTime") or event.get("lastTimestamp"))
        key = (str(involved.get("uid") or involved.get("name") or ""), str(involved.get("fieldPath") or ""))
        if when is not None and (key not in first or when < first[key]):
            first[key] = when
    return max(first.values(), default=None)


def _condition_time(pod: dict[str, Any], kind: str) -> float | None:
    for condition in status_of(pod).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return _when(condition.get("lastTransitionTime"))
    return None


def _first(values: Any) -> float | None:
    found = [v for v in values if v is not None]
    return min(found) if found else None


def _when(stamp: Any) -> float | None:
    """An RFC 3339 timestamp (as the API serves it, or a datetime from the kubernetes client) → Unix seconds."""
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    parsed = parse_time(stamp) if isinstance(stamp, str) else None
    return parsed.timestamp() if parsed else None
