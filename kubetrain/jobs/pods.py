"""Job → pods: which pods belong to a PyTorchJob or TrainJob, which replica each one is, and its container.

PyTorchJob pods carry ``training.kubeflow.org/job-name`` plus replica-type (master/worker; capitalised before
v1.9) and replica-index; the training container is ``pytorch``. TrainJob pods (a JobSet) carry
``jobset.sigs.k8s.io/jobset-name`` plus replicatedjob-name (``node``, initializers), job-index and the
Job's completion index; the trainer container is ``node``. Pods are plain dicts (the API's JSON).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kubetrain.errors import UsageError
from kubetrain.jobs.targets import PYTORCHJOB, TRAINJOB, Target
from kubetrain.kube import watch
from kubetrain.kube.errors import cluster_errors
from kubetrain.kube.objects import GPU_RESOURCE as GPU
from kubetrain.kube.objects import meta_of, status_of
from kubetrain.kube.rest import Rest, path_of

REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CONTAINER = {PYTORCHJOB.name: "pytorch", TRAINJOB.name: "node"}
ROLE_ORDER = {"master": 0, "node": 1, "worker": 2}
_REPLICA_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


@dataclass(frozen=True)
class Replica:
    """One pod of a job, as logs and gpu need it."""

    label: str  # "master-0", "worker-1", "node-3": the log prefix and --replica value
    role: str
    index: int
    pod: str
    uid: str
    container: str
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    node: str | None
    restarts: int  # restartCount of `container`
    state: str  # waiting, running, terminated (of `container`), or "" before the kubelet reports
    reason: str  # waiting/terminated reason, e.g. ContainerCreating, CrashLoopBackOff, Error, OOMKilled
    exit_code: int | None
    gpus: int
    deleting: bool = False
    obj: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def started(self) -> bool:
        """Has the container run (so it has logs)?"""
        return self.state in ("running", "terminated") or self.restarts > 0

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def _labels(pod: dict[str, Any]) -> dict[str, str]:
    return dict(meta_of(pod).get("labels") or {})


def role_and_index(pod: dict[str, Any], job: str = "") -> tuple[str, int]:
    labels = _labels(pod)
    annotations = meta_of(pod).get("annotations") or {}
    if REPLICA_TYPE in labels:
        return labels[REPLICA_TYPE].lower(), _int(labels.get(REPLICA_INDEX))
    if REPLICATED_JOB in labels:
        completion = _int(labels.get(COMPLETION_INDEX, annotations.get(COMPLETION_INDEX)))
        job_index = _int(labels.get(JOB_INDEX))
        role = labels[REPLICATED_JOB] if job_index == 0 else f"{labels[REPLICATED_JOB]}-{job_index}"
        return role, completion
    name = str(meta_of(pod).get("name", ""))
    suffix = name[len(job) + 1:] if job and name.startswith(job + "-") else name
    role, _, index = suffix.rpartition("-")
    return (role, int(index)) if role and index.isdigit() else (suffix or "pod", 0)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def container_of(pod: dict[str, Any], target: Target | None) -> str:
    """`pytorch` / `node` when the pod has it, else its first container."""
    names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
    preferred = [CONTAINER[target.name]] if target else list(CONTAINER.values())
    return next((n for n in preferred if n in names), names[0] if names else "")


def _container_status(pod: dict[str, Any], container: str) -> dict[str, Any]:
    statuses = status_of(pod).get("containerStatuses") or []
    return next((s for s in statuses if s.get("name") == container), {})


def _state(status: dict[str, Any]) -> tuple[str, str, int | None]:
    for key in ("terminated", "running", "waiting"):
        detail = (status.get("state") or {}).get(key)
        if detail is not None:
            return key, str(detail.get("reason") or ""), detail.get("exitCode")
    return "", "", None


def gpus_requested(pod: dict[str, Any], container: str | None = None) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        if container and c.get("name") != container:
            continue
        resources = c.get("resources") or {}
        total += _int((resources.get("limits") or {}).get(GPU) or (resources.get("requests") or {}).get(GPU))
    return total


def replica_of(pod: dict[str, Any], target: Target | None = None, job: str = "") -> Replica:
    meta = meta_of(pod)
    role, index = role_and_index(pod, job)
    container = container_of(pod, target)
    status = _container_status(pod, container)
    state, reason, exit_code = _state(status)
    return Replica(
        label=f"{role}-{index}", role=role, index=index, pod=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
        container=container, phase=str(status_of(pod).get("phase") or "Unknown"),
        node=(pod.get("spec") or {}).get("nodeName"), restarts=_int(status.get("restartCount")), state=state,
        reason=reason, exit_code=exit_code, gpus=gpus_requested(pod, container),
        deleting=bool(meta.get("deletionTimestamp")), obj=pod)


def sort_key(replica: Replica) -> tuple[int, str, int]:
    return ROLE_ORDER.get(replica.role, 3), replica.role, replica.index


def replicas_of(pods: list[dict[str, Any]], target: Target | None = None, job: str = "") -> list[Replica]:
    return sorted((replica_of(p, target, job) for p in pods), key=sort_key)


def waiting_for_claims(pod_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Pending pods that claim devices (DRA ResourceClaims)."""
    return [p for p in pod_list if status_of(p).get("phase") == "Pending" and (p.get("spec") or {})
            .get("resourceClaims")]


def list_pods(rest: Rest, target: Target, namespace: str, job: str) -> list[dict[str, Any]]:
    """The job's pods as dicts (all replica types; TrainJob initializers included)."""
    with cluster_errors(f"list pods in namespace {namespace}"):
        items, _ = watch.list_objects(pods_list_fn(rest, namespace), label_selector=target.pod_selector(job))
    return items


def pods_list_fn(rest: Rest, namespace: str) -> watch.ListFn:
    return watch.rest_list(rest, path_of("", "v1", "pods", namespace))


def job_replicas(rest: Rest, target: Target, namespace: str, job: str) -> list[Replica]:
    """Every pod of the job, master first, then by role and index."""
    return replicas_of(list_pods(rest, target, namespace, job), target, job)


def check_replica_filter(wanted: str) -> str:
    """--replica: all, a role (master, worker, node) or one replica (worker-2); lower-cased."""
    value = wanted.strip().lower()
    if not _REPLICA_RE.match(value):
        raise UsageError(f"--replica {wanted}: expected all, a role (master, worker, node) or a replica (worker-2)")
    return value


def matches(replica: Replica, wanted: str) -> bool:
    return wanted in ("all", replica.role, replica.label)


def select(replicas: list[Replica], wanted: str) -> list[Replica]:
    """The replicas --replica names; an error listing the job's replicas when it names none of them."""
    chosen = [r for r in replicas if matches(r, wanted)]
    if replicas and not chosen:
        have = ", ".join(r.label for r in replicas)
        raise UsageError(f"--replica {wanted}: the job has no such replica (it has: {have})")
    return chosen


def open_log(rest: Rest, namespace: str, pod: str, container: str | None, *, follow: bool = False,
             previous: bool = False, since_seconds: int | None = None, tail_lines: int | None = None) -> Any:
    """The pod's log as a streamed kubetrain.kube.transport response (always with timestamps). A followed log
    may be quiet for hours, so it has no read timeout; a plain read waits for the kubelet at most the
    client's kubelet_timeout (--request-timeout, else its own default): TimedOut."""
    query = {"container": container, "follow": follow or None, "previous": previous or None, "timestamps": True,
             "sinceSeconds": since_seconds, "tailLines": tail_lines}
    return rest.request("GET", path_of("", "v1", "pods", namespace, pod, "log"), query, stream=True,
                       read_timeout=None if follow else rest.kubelet_timeout)
