"""PyTorchJobs and TrainJobs: get, list, delete, wait; their conditions as one state; their shape."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubetrain.errors import ClusterError
from kubetrain.jobs.targets import AUTO_ORDER, NOT_INSTALLED, TARGETS, Target, controlling_trainingjob
from kubetrain.kube import watch
from kubetrain.kube.errors import NotFound, Unreachable, as_dict, cluster_errors, status_body
from kubetrain.kube.objects import GPU_RESOURCE as GPU
from kubetrain.kube.objects import SWEEP_LABEL, conditions_of, meta_of, status_of
from kubetrain.kube.rest import Rest, path_of

TERMINAL = ("Succeeded", "Failed")
TERMINATING = "Terminating"  # `list`: a job being deleted (metadata.deletionTimestamp set)
# Later entries win: a job that is Running and then Succeeded is Succeeded.
PYTORCHJOB_STATES = ("Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed")
TRAINJOB_STATES = {"Created": "Created", "Suspended": "Suspended", "Complete": "Succeeded", "Failed": "Failed"}


@dataclass(frozen=True)
class JobSummary:
    name: str
    namespace: str
    target: str
    state: str
    pods: int
    gpus_per_pod: int
    created: str  # RFC 3339, as the API gives it
    uid: str = ""
    queue: str = ""  # Kueue LocalQueue (the kueue.x-k8s.io/queue-name label), if any
    kueue: str = ""  # its Workload's state (kubetrain.queues.workloads.annotate), if any
    trainingjob: str = ""  # the TrainingJob that controls it (made by kubetrain controller), if any
    sweep: str = ""  # the Sweep this job is a trial of (the kubetrain.dev/sweep label), if any

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "namespace": self.namespace, "target": self.target, "state": self.state,
               "nodes": self.pods, "gpusPerNode": self.gpus_per_pod, "created": self.created}
        return (out | ({"queue": self.queue, "kueue": self.kueue} if self.queue else {})
                | ({"sweep": self.sweep} if self.sweep else {}))


conditions = conditions_of  # the job's status.conditions (kubetrain.kube.objects)


def state(obj: dict[str, Any]) -> str:
    """One word for the job's conditions: Pending, Created, Running, Restarting, Suspended, Succeeded, Failed."""
    true = {c.get("type") for c in conditions(obj) if c.get("status") == "True"}
    if obj.get("kind") == "TrainJob":
        found = [TRAINJOB_STATES[t] for t in TRAINJOB_STATES if t in true]
        if not found:
            return "Running" if _trainjob_active(obj) else "Pending"
        for terminal in TERMINAL:
            if terminal in found:
                return terminal
        return found[-1]
    for candidate in reversed(PYTORCHJOB_STATES):
        if candidate in true:
            return candidate
    return "Pending"


def _trainjob_active(obj: dict[str, Any]) -> bool:
    statuses = status_of(obj).get("jobsStatus") or []
    return any((s.get("active") or 0) > 0 for s in statuses)


def pod_specs(obj: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(replicas, pod spec) per replica type. A TrainJob's pod spec is its runtime patch plus its resources."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "TrainJob":
        trainer = spec.get("trainer") or {}
        pod: dict[str, Any] = {}
        for patch in spec.get("runtimePatches") or []:
            jobs = (((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {})
            for rjob in jobs.get("replicatedJobs") or []:
                pod = {**pod, **((((rjob.get("template") or {}).get("spec") or {}).get("template") or {})
                                 .get("spec") or {})}
        container = {"name": "node", "resources": trainer.get("resourcesPerNode") or {}}
        return [(int(trainer.get("numNodes") or 1), {**pod, "containers": [container]})]
    replicas = spec.get("pytorchReplicaSpecs") or {}
    return [(int(r.get("replicas", 1)), ((r.get("template") or {}).get("spec") or {})) for r in replicas.values()]


def gpus_of(pod_spec: dict[str, Any]) -> int:
    """nvidia.com/gpu one pod requests (extended resources: request = limit; either may be written)."""
    total = 0
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU) or (resources.get("requests") or {}).get(GPU) or 0
        total += int(value)
    return total


def shape(obj: dict[str, Any]) -> tuple[int, int]:
    """(pods, GPUs per pod): the largest per-pod GPU count across replica types."""
    specs = pod_specs(obj)
    return sum(n for n, _ in specs), max((gpus_of(s) for _, s in specs), default=0)


def summary(obj: dict[str, Any], target: Target) -> JobSummary:
    meta = meta_of(obj)
    pods, gpus = shape(obj)
    labels = meta.get("labels") or {}
    queue = str(labels.get("kueue.x-k8s.io/queue-name") or "")
    # Deleted in the foreground (as `delete` and the sweep's pruning do), a job stays listed with its last
    # conditions until its pods are gone: say so, as kubectl does for a pod.
    shown = TERMINATING if meta.get("deletionTimestamp") else state(obj)
    return JobSummary(meta.get("name", ""), meta.get("namespace", ""), target.name, shown, pods, gpus,
                      meta.get("creationTimestamp", ""), str(meta.get("uid") or ""), queue,
                      trainingjob=controlling_trainingjob(obj) or "", sweep=str(labels.get(SWEEP_LABEL) or ""))


def _path(target: Target, namespace: str | None, name: str | None = None) -> str:
    return path_of(target.group, target.version, target.plural, namespace, name)


def path_of_job(target: Target, namespace: str | None, name: str | None = None) -> str:
    """/apis/kubeflow.org/v1/namespaces/NS/pytorchjobs[/NAME]."""
    return _path(target, namespace, name)


def get(rest: Rest, target: Target, namespace: str, name: str) -> dict[str, Any] | None:
    """The job, or None if there is none of that name (a missing CRD or namespace is a ClusterError)."""
    found = _get(rest, target, namespace, name, probe=False)
    return None if isinstance(found, _NotServed) else found


class _NotServed:
    """The cluster does not serve the kind: the apiserver answers its paths with a bare "404 page not
    found", not with the Status that a missing object gets (which names the object)."""


def _get(rest: Rest, target: Target, namespace: str, name: str, probe: bool) -> dict[str, Any] | _NotServed | None:
    with cluster_errors(f"get {target.resource} {name} in namespace {namespace}"):
        try:
            return as_dict(rest.get(_path(target, namespace, name)))
        except NotFound as exc:
            if _object_missing(exc, name):
                return None
            if probe and _not_served(exc):
                return _NotServed()
            raise


def _not_served(exc: NotFound) -> bool:
    """No Status naming an object: the resource itself is not served (its CRD is not installed)."""
    return not status_body(exc)


def _object_missing(exc: NotFound, name: str) -> bool:
    details = status_body(exc).get("details") or {}
    return bool(details.get("name") == name and details.get("kind") != "namespaces")


def find(rest: Rest, targets: list[Target] | None, namespace: str, name: str) -> tuple[Target, dict[str, Any]]:
    """The job called `name` among `targets`, or (None) among the kinds the cluster serves, which the GETs
    themselves tell (no discovery round trip first); a one-line error when there is none."""
    served = []
    for target in AUTO_ORDER if targets is None else targets:
        obj = _get(rest, target, namespace, name, probe=targets is None)
        if isinstance(obj, dict):
            return target, obj
        if obj is None:
            served.append(target)
    if not served:
        raise not_installed(rest)
    check_namespace(rest, namespace)  # the same message for every command when -n names no namespace
    kinds = " or ".join(t.kind for t in served)
    raise ClusterError(f"no {kinds} named {name} in namespace {namespace} (list them: kubetrain list -n {namespace})")


def find_job(rest: Rest, namespace: str, name: str,
             target: str | Target | None) -> tuple[Target, dict[str, Any]]:
    """The job and its kind; `target` None or "auto" looks among the installed kinds. The one job lookup of
    every command (status, events, logs, gpu, delete) and of kubetrain.api."""
    if isinstance(target, Target):
        return find(rest, [target], namespace, name)
    return find(rest, [TARGETS[target]] if target and target != "auto" else None, namespace, name)


def not_installed(rest: Rest) -> ClusterError:
    """Neither job kind is served. Unless the server is no Kubernetes API server at all: a wrong URL or proxy
    path answers every path with 404, /version too. One more request, on this error path only."""
    try:
        rest.get("/version")
    except NotFound:
        return Unreachable(f"{rest.server} is not a Kubernetes API server (it answers GET /version with 404): "
                           "check the server URL of your kubeconfig's cluster (kubectl config view --minify)")
    except Exception:  # any other failure: the job kinds are what is missing
        pass
    return ClusterError(NOT_INSTALLED)


def check_namespace(rest: Rest, namespace: str) -> None:
    """A ClusterError naming the fix if `namespace` does not exist (silent when we may not read namespaces)."""
    try:
        rest.get(f"/api/v1/namespaces/{namespace}")
    except NotFound:
        raise ClusterError(f"namespace {namespace} does not exist: pass the right -n/--namespace "
                           f"(kubectl get namespaces) or create it: kubectl create namespace {namespace}") from None
    except Exception:  # we may not read namespaces: the request that follows says what is wrong
        pass


def list_objects(rest: Rest, target: Target, namespace: str | None) -> list[dict[str, Any]]:
    """The objects of one kind, in one namespace or (None) all of them."""
    where = f"namespace {namespace}" if namespace else "all namespaces"
    with cluster_errors(f"list {target.resource} in {where}"):
        return list(as_dict(rest.get(_path(target, namespace))).get("items") or [])


def list_jobs(rest: Rest, targets: list[Target] | None, namespace: str | None) -> list[JobSummary]:
    """Jobs of every given kind (None: of every kind the cluster serves, which the lists themselves tell), in
    one namespace or (None) all of them, oldest first."""
    out: list[JobSummary] = []
    served = 0
    for target in AUTO_ORDER if targets is None else targets:
        where = f"namespace {namespace}" if namespace else "all namespaces"
        with cluster_errors(f"list {target.resource} in {where}"):
            try:
                body = rest.get(_path(target, namespace))
            except NotFound as exc:
                if targets is None and _not_served(exc):
                    continue
                raise
        served += 1
        out += [summary(item, target) for item in as_dict(body).get("items") or []]
    if not served:
        raise not_installed(rest)
    return sorted(out, key=lambda s: (s.created, s.namespace, s.name))


def delete(rest: Rest, target: Target, namespace: str, name: str, propagation: str = "Background") -> bool:
    """Delete the job; False if it was already gone."""
    with cluster_errors(f"delete {target.resource} {name} in namespace {namespace}"):
        try:
            rest.json("DELETE", _path(target, namespace, name),
                              body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation})
        except NotFound as exc:
            if _object_missing(exc, name):
                return False
            raise
    return True


def _list_fn(rest: Rest, target: Target, namespace: str) -> Any:
    return watch.rest_list(rest, _path(target, namespace))


def wait_gone(rest: Rest, target: Target, namespace: str, name: str, timeout: float | None) -> None:
    with cluster_errors(f"watch {target.resource} in namespace {namespace}"):
        watch.wait_for(_list_fn(rest, target, namespace), lambda cache: not cache, timeout=timeout,
                       what=f"{target.kind} {name} to be deleted", field_selector=f"metadata.name={name}")


def wait_finished(rest: Rest, target: Target, namespace: str, name: str, timeout: float | None,
                  on_retry: Callable[[str], None] | None = None) -> str:
    """Block until the job is Succeeded or Failed; return which. A deleted job is an error."""
    def check(cache: dict[tuple[str, str], dict[str, Any]]) -> str | None:
        obj = cache.get((namespace, name))
        if obj is None:
            raise ClusterError(f"{target.kind} {name} was deleted while waiting for it to finish")
        current = state(obj)
        return current if current in TERMINAL else None

    with cluster_errors(f"watch {target.resource} in namespace {namespace}"):
        return watch.wait_for(_list_fn(rest, target, namespace), check, timeout=timeout, on_retry=on_retry,
                              what=f"{target.kind} {name} to finish", field_selector=f"metadata.name={name}")
