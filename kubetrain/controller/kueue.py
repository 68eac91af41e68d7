"""Queued/Admitted under Kueue: the child's Workload (from an informer) as two conditions. Pure functions.

Kueue creates one Workload per queued child (PyTorchJob or TrainJob, labelled kueue.x-k8s.io/queue-name),
owned by the child and labelled with the child's UID. The conditions' message is the CLI's Kueue hint
(`kubetrain.queues.workloads.hint`, what `kubetrain status` prints): the same line, one implementation.
The pending position is counted among the namespace's Workloads in the informer's cache (no extra reads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubetrain.controller.mirror import condition
from kubetrain.jobs import targets
from kubetrain.kube.objects import meta_of
from kubetrain.queues import workloads as queues

if TYPE_CHECKING:
    from kubetrain.kube.rest import Rest

PLURAL = "workloads"
Key = tuple[str, str]
CHILD_KINDS = {t.kind for t in targets.TARGETS.values()}


def served_version(rest: Rest) -> str | None:
    """The Kueue version whose Workloads the cluster serves (None: no Kueue)."""
    return next((v for v in queues.VERSIONS if targets.serves(rest, queues.GROUP, v, PLURAL)), None)


def owner_key(wl: dict[str, Any]) -> Key | None:
    """The TrainingJob behind a Workload: its owner is the child, which is named like its TrainingJob."""
    meta = meta_of(wl)
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") in CHILD_KINDS:
            return str(meta.get("namespace") or ""), str(ref.get("name"))
    return None


def waiting(wl: dict[str, Any]) -> bool:
    return queues.workload_state(wl).state in ("pending", "requeued")


def siblings(wl: dict[str, Any], others: list[dict[str, Any]]) -> list[Key]:
    """The jobs whose pending position moves when `wl` leaves (or joins) its LocalQueue's pending set."""
    meta = meta_of(wl)
    queue = (wl.get("spec") or {}).get("queueName")
    keys = []
    for other in others:
        if meta_of(other).get("namespace") == meta.get("namespace") \
                and (other.get("spec") or {}).get("queueName") == queue and waiting(other):
            key = owner_key(other)
            if key:
                keys.append(key)
    return keys


def conditions(queue: str, child: dict[str, Any] | None, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Queued and Admitted for a child in LocalQueue `queue`; `candidates`: the namespace's Workloads."""
    if child is None:
        line = f"Kueue: LocalQueue {queue}: the job is being created"
        return [condition("Queued", True, "Creating", line), condition("Admitted", False, "Creating", line)]
    line = queues.hint(child, candidates) or ""
    wl = queues.for_job(child, candidates)
    if wl is None:
        return [condition("Queued", True, "NoWorkload", line), condition("Admitted", False, "NoWorkload", line)]
    state = queues.workload_state(wl)
    if state.state in ("pending", "requeued"):
        reason = "Pending" if state.state == "pending" else "Requeued"
        return [condition("Queued", True, reason, line), condition("Admitted", False, reason, line)]
    if state.state in ("admitted", "finished"):
        reason = "Admitted" if state.state == "admitted" else "Finished"
        return [condition("Queued", False, reason, line), condition("Admitted", True, reason, line)]
    reason = _camel(state.reason or state.state)  # evicted, preempted
    message = line or f"Kueue: {state.state}: {state.message}"
    return [condition("Queued", False, reason, message), condition("Admitted", False, reason, message)]


def _camel(word: str) -> str:
    return word[:1].upper() + word[1:]
