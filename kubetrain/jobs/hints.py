"""Events and pod statuses → one-line hints saying what is wrong and what to do. Pure functions over dicts."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from kubetrain.kube.objects import status_of

IMAGE_REASONS = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"}
_INSUFFICIENT = re.compile(r"(\d+) Insufficient ([\w./-]*\w)")
_TAINT = re.compile(r"(\d+) node\(s\) had untolerated taint(?:s)? \{([^}]*)\}")
_AFFINITY = re.compile(r"(\d+) node\(s\) didn't match Pod's node affinity/selector")
_CORDONED = re.compile(r"(\d+) node\(s\) were unschedulable")
_DENIED = re.compile(r'admission webhook "([^"]+)" denied the request: ([\w.\[\]-]+): ')
# An operator's Events that say it could not create or update the job's children (Trainer v2: the JobSet).
CREATION_FAILED = {"TrainJobResourcesCreationFailed", "FailedCreate"}
SHORT = 200  # characters of an Event message shown in a table or a hint
# The kubelet retries these by itself a moment later: not worth a hint unless they last (see event_hints).
TRANSIENT_MOUNT = ("configmap cache", "not registered")


def scheduling_hints(message: str) -> list[str]:
    """Hints for a scheduler message ("0/4 nodes are available: 2 Insufficient nvidia.com/gpu, ...")."""
    text = message.split(" preemption:", 1)[0]
    hints = []
    for count, resource in _INSUFFICIENT.findall(text):
        # The scheduler's count is of nodes lacking free capacity, not of nodes the job is short.
        hints.append(f"not enough free {resource} on {count} node(s): wait for running pods to finish, "
                     f"lower nodes / gpusPerNode or resources, or add capacity (kubetrain gpu)")
    for count, taint in _TAINT.findall(text):
        if taint.startswith("node.kubernetes.io/"):
            hints.append(f"{count} node(s) are not ready ({taint}): check them with kubectl get nodes")
            continue
        hints.append(f"{count} node(s) have taint {{{taint}}} the pod does not tolerate: add it to "
                     f"spec.placement.tolerations if the job may run there")
    for (count,) in (m.groups() for m in _AFFINITY.finditer(text)):
        hints.append(f"{count} node(s) lack the labels of the pod's nodeSelector/affinity: check "
                     f"spec.placement (gpuType, nodeSelector, cloud) against kubectl get nodes --show-labels")
    for (count,) in (m.groups() for m in _CORDONED.finditer(text)):
        hints.append(f"{count} node(s) are cordoned (unschedulable)")
    if "unbound immediate PersistentVolumeClaims" in text or "persistentvolumeclaim" in text.lower():
        hints.append("a PersistentVolumeClaim of spec.volumes is missing or unbound: kubectl get pvc")
    return hints


def event_hints(event: dict[str, Any]) -> list[str]:
    """Hints for one core/v1 Event (as the API's JSON)."""
    reason = str(event.get("reason") or "")
    message = str(event.get("message") or "")
    if reason in ("FailedScheduling", "Unschedulable"):  # the scheduler's, and the operator's copy on the job
        return scheduling_hints(message)
    if reason in IMAGE_REASONS or "ErrImagePull" in message or "Failed to pull image" in message \
            or "Back-off pulling image" in message:
        return [_image_hint(message)]
    if reason == "BackOff" and "restarting failed container" in message:
        return [_crash_hint()]
    if reason in {"Evicted", "Preempted", "Preempting"} or "evict" in reason.lower():
        return [f"pod evicted: {message}; it restarts only if runPolicy allows (backoffLimit, restartPolicy)"]
    if reason in {"OOMKilling", "OOMKilled"}:
        return [_oom_hint()]
    if reason == "FailedMount":
        if any(text in message for text in TRANSIENT_MOUNT) and int(event.get("count") or 1) < 5:
            return []  # "failed to sync configmap cache": the kubelet's informer was not synced yet; it retries
        return [f"a volume could not be mounted: {shorten(message)}"]
    if reason == "FailedCreate" and "forbidden" in message:
        return [f"the operator could not create a pod: {shorten(message)}"]
    if reason in CREATION_FAILED:
        return [f"the operator could not create or update the job's resources ({reason}): {shorten(message)}"]
    return []


def shorten(message: str, limit: int = SHORT) -> str:
    """One line of at most `limit` characters; a webhook denial keeps who denied it, the field and why (the
    middle is a dump of the whole object, often over 1,000 characters)."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    if denied := _DENIED.search(first):
        why = first.rsplit(": ", 1)[-1]
        first = f'{first[:denied.start()]}admission webhook "{denied.group(1)}" denied the request: ' \
            f"{denied.group(2)}: {why}"
    return first if len(first) <= limit else first[:limit - 1] + "…"


def pod_hints(pod: dict[str, Any]) -> list[str]:
    """Hints from a pod's status: image pulls, crash loops, OOM kills, evictions, scheduling."""
    status = status_of(pod)
    hints: list[str] = []
    if status.get("reason") == "Evicted":
        hints.append(f"pod evicted: {status.get('message', '')}".rstrip(": "))
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            hints += scheduling_hints(str(condition.get("message") or ""))
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        hints += _container_hints(container)
    return unique(hints)


def _container_hints(container: dict[str, Any]) -> list[str]:
    waiting = (container.get("state") or {}).get("waiting") or {}
    terminated = (container.get("state") or {}).get("terminated") or {}
    last = (container.get("lastState") or {}).get("terminated") or {}
    hints = []
    if waiting.get("reason") in IMAGE_REASONS:
        hints.append(_image_hint(str(waiting.get("message") or container.get("image") or "")))
    if waiting.get("reason") == "CrashLoopBackOff":
        hints.append(_crash_hint())
    if waiting.get("reason") == "CreateContainerConfigError":
        hints.append(f"container config error: {waiting.get('message', '')} (a Secret or key of spec.secretEnv?)")
    if "OOMKilled" in (terminated.get("reason"), last.get("reason")):
        hints.append(_oom_hint())
    return hints


def last_termination(pod: dict[str, Any]) -> str:
    """'OOMKilled (exit 137)' for the most recent termination of any container, or ''."""
    for container in status_of(pod).get("containerStatuses") or []:
        for source in ((container.get("state") or {}).get("terminated"),
                       (container.get("lastState") or {}).get("terminated")):
            if source:
                return f"{source.get('reason') or 'Terminated'} (exit {source.get('exitCode', '?')})"
    return ""


def _image_hint(detail: str) -> str:
    short = detail.splitlines()[0][:160] if detail else ""
    return (f"cannot pull the image{': ' + short if short else ''}: check spec.image (name, tag, registry) "
            "and spec.imagePullSecrets")


def _crash_hint() -> str:
    return "the container keeps crashing (CrashLoopBackOff): see kubetrain logs NAME --previous"


def _oom_hint() -> str:
    return "the container was OOMKilled: raise spec.resources.memory (and shmSize) or lower the batch size"


def unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
