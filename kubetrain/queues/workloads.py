"""Kueue, read over REST: a job's Workload state as one line, and the quota a LocalQueue leads to.

Kueue represents every job it manages (a PyTorchJob, TrainJob, JobSet with the
`kueue.x-k8s.io/queue-name` label) by a Workload in the job's namespace, labelled with the job's UID
(`kueue.x-k8s.io/job-uid`). Its conditions say where the job is:

* QuotaReserved False: pending; the condition's message is Kueue's reason ("couldn't assign flavors to
  pod set master: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed");
* QuotaReserved + Admitted True: admitted, status.admission names the ClusterQueue and flavors;
* Evicted True (reason Preempted, PodsReadyTimeout, ...), then Requeued True once it is back in the queue.

The position of a pending job is counted among the pending Workloads of its LocalQueue in the namespace,
ordered as Kueue's BestEffortFIFO/StrictFIFO heads order them (priority, then creation time). Kueue's
own answer (the visibility API's pendingworkloads) is an optional aggregated API server that many
clusters do not run, and it needs a cluster-scoped permission.

Only REST (kubetrain.kube.rest): `status` and `list` must not import the kubernetes package.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kubetrain.kube.errors import ApiError, NotFound
from kubetrain.kube.objects import JOB_UID_LABEL, QUEUE_LABEL, meta_of, status_of
from kubetrain.kube.rest import Rest, path_of

if TYPE_CHECKING:
    from kubetrain.jobs.crud import JobSummary

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # Kueue >= 0.15 serves v1beta2; older ones only v1beta1


def kueue_get(rest: Rest, plural: str, namespace: str | None = None, name: str | None = None,
         **query: Any) -> dict[str, Any] | None:
    """The object (or list) from the first Kueue API version served; None when Kueue is not there (404)."""
    for version in VERSIONS:
        try:
            return rest.get(path_of(GROUP, version, plural, namespace, name), **query)
        except NotFound:
            if name is not None and _served(rest, version, plural):
                return None  # the kind is there, the object is not
    return None


def _served(rest: Rest, version: str, plural: str) -> bool:
    try:
        rest.get(path_of(GROUP, version, plural), limit=1)
    except ApiError:
        return False
    return True


def queue_of(obj: dict[str, Any]) -> str | None:
    return (meta_of(obj).get("labels") or {}).get(QUEUE_LABEL)


def _condition(wl: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in status_of(wl).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def _false_condition(wl: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in status_of(wl).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "False":
            return dict(cond)
    return None


@dataclass(frozen=True)
class WorkloadState:
    state: str  # pending | admitted | evicted | preempted | requeued | finished
    reason: str
    message: str
    cluster_queue: str = ""

    def short(self) -> str:
        return self.state + (f" ({self.reason})" if self.reason and self.state != "admitted" else "")


def workload_state(wl: dict[str, Any]) -> WorkloadState:
    admission = status_of(wl).get("admission") or {}
    cq = str(admission.get("clusterQueue") or "")
    if done := _condition(wl, "Finished"):
        return WorkloadState("finished", str(done.get("reason", "")), str(done.get("message", "")), cq)
    evicted = _condition(wl, "Evicted")
    if evicted and (requeued := _condition(wl, "Requeued")):
        why = f"{evicted.get('reason', '')}: {evicted.get('message', '')}".strip(": ")
        return WorkloadState("requeued", str(evicted.get("reason", "")), f"{why}; {requeued.get('message', '')}")
    if preempted := _condition(wl, "Preempted"):
        return WorkloadState("preempted", str(preempted.get("reason", "")), str(preempted.get("message", "")), cq)
    if evicted:
        return WorkloadState("evicted", str(evicted.get("reason", "")), str(evicted.get("message", "")), cq)
    if _condition(wl, "Admitted"):
        return WorkloadState("admitted", "", "", cq)
    pending = _false_condition(wl, "QuotaReserved") or _false_condition(wl, "Requeued") or {}
    return WorkloadState("pending", str(pending.get("reason", "")), str(pending.get("message", "")))


def workloads(rest: Rest, namespace: str | None) -> list[dict[str, Any]]:
    """The Workloads of a namespace (every namespace: None); [] without Kueue. One request."""
    found = kueue_get(rest, "workloads", namespace)
    return list((found or {}).get("items") or [])


def _order(wl: dict[str, Any]) -> tuple[int, str]:
    return -int((wl.get("spec") or {}).get("priority") or 0), str(meta_of(wl).get("creationTimestamp"))


def position(wl: dict[str, Any], others: list[dict[str, Any]]) -> int:
    """1-based place of a pending Workload among the pending ones of its LocalQueue (same namespace)."""
    queue = (wl.get("spec") or {}).get("queueName")
    ahead = [o for o in others if (o.get("spec") or {}).get("queueName") == queue
             and workload_state(o).state in ("pending", "requeued") and _order(o) < _order(wl)]
    return len(ahead) + 1


def for_job(obj: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, Any] | None:
    uid = meta_of(obj).get("uid")
    for wl in candidates:
        if (meta_of(wl).get("labels") or {}).get(JOB_UID_LABEL) == uid:
            return wl
    return None


def hint(obj: dict[str, Any], candidates: list[dict[str, Any]]) -> str | None:
    """One line about the job's place in Kueue; None for a job without a queue label."""
    queue = queue_of(obj)
    if not queue:
        return None
    wl = for_job(obj, candidates)
    if wl is None:
        return (f"Kueue: no Workload for this job in LocalQueue {queue} yet: if it stays suspended, check that "
                "Kueue runs and that its integration for this kind is enabled (integrations.frameworks)")
    state = workload_state(wl)
    if state.state == "admitted":
        again = _requeued(wl)
        return f"Kueue: admitted by ClusterQueue {state.cluster_queue} (LocalQueue {queue}){again}"
    if state.state == "pending":
        place = position(wl, candidates)
        why = f": {state.message}" if state.message else ""
        return f"Kueue: pending in LocalQueue {queue}, position {place}{why}"
    if state.state == "requeued":
        return f"Kueue: evicted and requeued in LocalQueue {queue} ({state.message})"
    if state.state == "finished":
        return None
    return f"Kueue: {state.state} ({state.reason}): {state.message}"


def _requeued(wl: dict[str, Any]) -> str:
    """", after 2 eviction(s) (PodsReadyTimeout)" for a Workload Kueue has evicted and admitted again."""
    count = int((status_of(wl).get("requeueState") or {}).get("count") or 0)
    if not count:
        return ""
    reasons = [c.get("reason") for c in status_of(wl).get("conditions") or [] if c.get("type") == "Evicted"]
    return f", after {count} eviction(s)" + (f" ({reasons[0]})" if reasons and reasons[0] else "")


def job_hint(rest: Rest, obj: dict[str, Any]) -> str | None:
    """`hint` for one job: one request (its namespace's Workloads), none without a queue label."""
    if not queue_of(obj):
        return None
    namespace = str(meta_of(obj).get("namespace") or "")
    return hint(obj, workloads(rest, namespace))


def states(rest: Rest, namespace: str | None) -> dict[str, str]:
    """job UID -> short Workload state ("pending #2", "admitted", "requeued (PodsReadyTimeout)"): one request."""
    found = workloads(rest, namespace)
    out = {}
    for wl in found:
        uid = (meta_of(wl).get("labels") or {}).get(JOB_UID_LABEL)
        if uid:
            state = workload_state(wl)
            out[uid] = f"pending #{position(wl, found)}" if state.state == "pending" else state.short()
    return out


def annotate(rest: Rest, found: list[JobSummary], namespace: str | None) -> list[JobSummary]:
    """`list`: each queued job's Workload state (one request, and none when no job has a queue label)."""
    if not any(s.queue for s in found):
        return found
    known = states(rest, namespace)
    return [replace(s, kueue=known.get(s.uid, "no workload")) if s.queue else s for s in found]
