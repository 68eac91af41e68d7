"""Why a replica's pod was re-created, from what the old pod said last and from its TrainingJob. Pure.

Kubernetes records why it removed a pod on the pod itself (since 1.26): a DisruptionTarget condition whose
reason names the taint manager (its node was unreachable), the Eviction API or the kubelet (node pressure),
or the scheduler (preemption); an older kubelet's eviction leaves status.reason Evicted. The kubetrain
controller's hang policy writes status.hang.lastRestartTime on the TrainingJob before it deletes the pods.
"""

from __future__ import annotations

from typing import Any

from kubetrain.kube.objects import meta_of, parse_time, status_of

DISRUPTIONS = {"DeletionByTaintManager": "node lost", "EvictionByEvictionAPI": "evicted",
               "TerminationByKubelet": "evicted by its kubelet", "PreemptionByScheduler": "preempted",
               "DeletionByPodGC": "node lost"}


def recreation_reason(old_pod: dict[str, Any], trainingjob: dict[str, Any] | None = None) -> str:
    """"restarted by the hang policy", "evicted", "node lost", "preempted", "its container failed (exit 1)",
    or "" when nothing says."""
    status = status_of(old_pod)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            found = DISRUPTIONS.get(str(condition.get("reason")))
            if found:
                return found
    if status.get("reason") == "Evicted":
        return "evicted"
    if status.get("reason") == "NodeLost":
        return "node lost"
    if _hang_restart_after(trainingjob, meta_of(old_pod).get("creationTimestamp")):
        return "restarted by the hang policy"
    code = _failed_exit(status)
    return f"its container failed (exit {code})" if code is not None else ""


def _hang_restart_after(trainingjob: dict[str, Any] | None, created: Any) -> bool:
    restarted = parse_time((status_of(trainingjob or {}).get("hang") or {}).get("lastRestartTime"))
    born = parse_time(created)
    return restarted is not None and (born is None or restarted >= born)


def _failed_exit(status: dict[str, Any]) -> int | None:
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated and terminated.get("exitCode") not in (None, 0):
            return int(terminated["exitCode"])
    return None
