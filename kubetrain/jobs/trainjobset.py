"""The JobSet Kubeflow Trainer v2.3.0 creates from a TrainJob and its (Cluster)TrainingRuntime, for
`validate --exact` to dry-run (and the Jobs JobSet v0.12.0 makes of it).

Mirrors the Trainer's torch path (pkg/runtime/core/trainingruntime.go `newRuntimeInfo`, the Torch plugin's
`EnforceMLPolicy`, the JobSet plugin's `SyncParallelCount` and `Build`, jobset/builder.go):

- the runtime's template, with each runtime patch merged in as a strategic merge patch (lists of named
  things merged by their key), the replicated jobs kept in the runtime's order;
- the patches' template labels and annotations on the JobSet;
- the trainer job (label `trainer.kubeflow.org/trainjob-ancestor-step: trainer`): its pod count `numNodes`
  (the TrainJob's, else the runtime's mlPolicy's); with `spec.trainer` set, `resourcesPerNode` merged into the
  `node` container's resources, `image`, `command`, `args`, `env`, the torch plugin's PET_* variables and
  port 29500;
- every replicated job's `parallelism` and `completions` set to its pod count, `replicas` 1 for the trainer
  and initializer jobs; the initializers' STORAGE_URI, env and secretRef;
- `suspend` and the owner reference to the TrainJob.

A runtime with a podGroupPolicy (coscheduling, volcano) also gets pod-group labels the derivation leaves out;
runtimes of other ML policies (MPI, JAX, XGBoost) are not derived.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

from kubetrain.rules.findings import get
from kubetrain.rules.quantity import parse_quantity

TRAINER_API = "trainer.kubeflow.org/v1alpha1"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_PORT = 29500
JOB_COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
INITIALIZERS = {"dataset-initializer": "dataset", "model-initializer": "model"}
# patchMergeKey of the lists a strategic merge patch of a JobSetSpec merges (jobset and k8s.io/api types);
# every other list is replaced
MERGE_KEYS = {"replicatedJobs": "name", "containers": "name", "initContainers": "name",
              "ephemeralContainers": "name", "env": "name", "volumes": "name", "volumeMounts": "mountPath",
              "volumeDevices": "devicePath", "ports": "containerPort", "imagePullSecrets": "name",
              "hostAliases": "ip", "resourceClaims": "name", "claims": "name",
              "topologySpreadConstraints": "topologyKey"}


# Trainer v2.3.0's manifests/base/runtimes/torch_distributed.yaml: the runtime kubetrain's TrainJobs name, used
# when the files validated do not define it themselves.
TORCH_DISTRIBUTED = {
    "apiVersion": TRAINER_API, "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed", "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
        "name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}, "spec": {"template": {"spec": {
            "containers": [{"name": "node", "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}]}}}}}]}}},
}


def runtime_for(trainjob: dict[str, Any], defined: dict[tuple[str, str, str], dict[str, Any]]) -> dict[str, Any] | None:
    """The runtime a TrainJob's runtimeRef names: one the files defined ((kind, namespace or "", name)), else
    the shipped torch-distributed; None when the derivation does not mirror it."""
    ref = _mapping(get(trainjob, "spec", "runtimeRef"))
    kind = ref.get("kind", "ClusterTrainingRuntime")
    namespace = str(get(trainjob, "metadata", "namespace") or "default") if kind == "TrainingRuntime" else ""
    runtime = defined.get((str(kind), namespace, str(ref.get("name"))))
    if runtime is None and kind == "ClusterTrainingRuntime" and ref.get("name") == "torch-distributed":
        runtime = TORCH_DISTRIBUTED
    return runtime if derivable(runtime) else None


def derivable(runtime: dict[str, Any] | None) -> bool:
    """A runtime the derivation mirrors: a JobSet template under the torch ML policy."""
    spec = get(runtime, "spec")
    return isinstance(get(spec, "template", "spec", "replicatedJobs"), list) and \
        isinstance(get(spec, "mlPolicy", "torch"), dict)


def trainjob_jobset(trainjob: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The JobSet the Trainer applies for `trainjob` (as the API server stores it: defaults set) and
    `runtime` (a TrainingRuntime or ClusterTrainingRuntime object)."""
    rspec = _mapping(runtime.get("spec"))
    template = _mapping(rspec.get("template"))
    patches = [p for p in _list(get(trainjob, "spec", "runtimePatches")) if isinstance(p, dict)]
    labels, annotations = _propagated(template, patches)
    spec = merged_template_spec(_mapping(template.get("spec")), patches)
    trainer = get(trainjob, "spec", "trainer")
    trainer = trainer if isinstance(trainer, dict) else None
    name = str(get(trainjob, "metadata", "name"))
    for job in _list(spec.get("replicatedJobs")):
        _shape_job(job, trainer, _mapping(rspec.get("mlPolicy")), name)
    _initializers(spec, _mapping(get(trainjob, "spec", "initializer")))
    suspend = get(trainjob, "spec", "suspend")
    if suspend is not None:
        spec["suspend"] = suspend
    metadata: dict[str, Any] = {"name": name, "ownerReferences": [{
        "apiVersion": TRAINER_API, "kind": "TrainJob", "name": name, "uid": str(get(trainjob, "metadata", "uid")),
        "controller": True, "blockOwnerDeletion": True}]}
    if namespace := get(trainjob, "metadata", "namespace"):
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": metadata, "spec": spec}


def merged_template_spec(spec: dict[str, Any], patches: list[dict[str, Any]]) -> dict[str, Any]:
    """The runtime's JobSet spec with every patch's template spec merged in (`mergeRuntimePatches`)."""
    order = {job.get("name"): i for i, job in enumerate(_list(spec.get("replicatedJobs"))) if isinstance(job, dict)}
    merged = copy.deepcopy(spec)
    for patch in patches:
        patch_spec = get(patch, "trainingRuntimeSpec", "template", "spec")
        if isinstance(patch_spec, dict):
            merged = strategic_merge(merged, patch_spec)
    jobs = _list(merged.get("replicatedJobs"))
    merged["replicatedJobs"] = sorted(jobs, key=lambda job: order.get(_mapping(job).get("name"), len(order)))
    return merged


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """apimachinery's StrategicMergePatch for the fields above: maps merged (a null deletes), lists with a
    merge key merged item by item (new items appended), every other value replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for name, value in patch.items():
            if value is None:
                out.pop(name, None)
            else:
                out[name] = strategic_merge(out.get(name), value, name)
        return out
    merge_key = MERGE_KEYS.get(key)
    if merge_key and isinstance(base, list) and isinstance(patch, list):
        out_list = list(base)
        for item in patch:
            at = _index_by(out_list, merge_key, _mapping(item).get(merge_key))
            if at is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[at] = strategic_merge(out_list[at], item)
        return out_list
    return copy.deepcopy(patch)


def _propagated(template: dict[str, Any], patches: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    labels = dict(_mapping(get(template, "metadata", "labels")))
    annotations = dict(_mapping(get(template, "metadata", "annotations")))
    for patch in patches:
        labels.update(_mapping(get(patch, "trainingRuntimeSpec", "template", "metadata", "labels")))
        annotations.update(_mapping(get(patch, "trainingRuntimeSpec", "template", "metadata", "annotations")))
    return labels, annotations


def _shape_job(job: Any, trainer: dict[str, Any] | None, ml_policy: dict[str, Any], trainjob_name: str) -> None:
    if not isinstance(job, dict):
        return
    job_spec = _mapping(get(job, "template", "spec"))
    count = job_spec.get("parallelism", 1)
    if get(job, "template", "metadata", "labels", ANCESTOR) == "trainer":
        count = ml_policy.get("numNodes", 1) if ml_policy else count
        count = (trainer or {}).get("numNodes", count)
        job["replicas"] = 1
        for container in _containers(job, "containers"):
            if container.get("name") == "node" and trainer is not None:  # no trainer: the runtime's as it is
                _shape_node(container, trainer, count, trainjob_name)
    if isinstance(job_spec, dict) and "template" in job_spec:
        job_spec["parallelism"] = job_spec["completions"] = count


def _shape_node(container: dict[str, Any], trainer: dict[str, Any], count: Any, trainjob_name: str) -> None:
    """The trainer's `node` container: resourcesPerNode merged in, the Torch plugin's env and port, then the
    builder's image, command, args."""
    resources = trainer.get("resourcesPerNode")
    if isinstance(resources, dict):  # only limits and requests reach the JobSet: the runtime's claims are lost
        merged = strategic_merge(_mapping(container.get("resources")), resources)
        container["resources"] = {k: v for k, v in merged.items() if k in ("limits", "requests")}
    per_node = resources if isinstance(resources, dict) else _mapping(container.get("resources"))
    env = container.setdefault("env", [])
    for var in _list(trainer.get("env")):
        upsert(env, var, "name")
    for var in _torch_env(_proc_per_node(trainer, per_node), count, trainjob_name):
        upsert(env, var, "name")
    ports = container.setdefault("ports", [])
    # apply.UpsertPort matches by port or by name, and a missing name equals a missing name: the first unnamed
    # port is replaced
    at = next((i for i, port in enumerate(ports) if _mapping(port).get("containerPort") == TRAINER_PORT
               or _mapping(port).get("name") is None), None)
    if at is None:
        ports.append({"containerPort": TRAINER_PORT})
    else:
        ports[at] = {"containerPort": TRAINER_PORT}
    for field in ("image", "command", "args"):
        if trainer.get(field) is not None:
            container[field] = trainer[field]


def _torch_env(proc_per_node: str, count: Any, trainjob_name: str) -> list[dict[str, Any]]:
    return [{"name": "PET_NNODES", "value": str(count)},
            {"name": "PET_NPROC_PER_NODE", "value": proc_per_node},
            {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": JOB_COMPLETION_INDEX}}},
            {"name": "PET_MASTER_ADDR", "value": f"{trainjob_name}-node-0-0.{trainjob_name}"},
            {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)}]


def _proc_per_node(trainer: dict[str, Any], resources: dict[str, Any]) -> str:
    """numProcPerNode, else "auto" with a GPU (a resource whose name contains "gpu") in the node's resources
    (the TrainJob's resourcesPerNode, else the runtime's), else its CPUs (requests, else limits; at least 1)."""
    if isinstance(trainer.get("numProcPerNode"), int):
        return str(trainer["numProcPerNode"])
    limits, requests = _mapping(resources.get("limits")), _mapping(resources.get("requests"))
    if any("gpu" in str(name).lower() and _whole(value) > 0 for name, value in {**limits, **requests}.items()):
        return "auto"
    cpu = requests.get("cpu") if _whole(requests.get("cpu")) else limits.get("cpu")
    return str(max(1, _whole(cpu)))


def _whole(value: Any) -> int:
    """resource.Quantity.Value(): the quantity rounded up to a whole number (0 when it is none)."""
    try:
        return math.ceil(parse_quantity(value)) if value is not None else 0
    except (ValueError, ArithmeticError):
        return 0


def _initializers(spec: dict[str, Any], initializer: dict[str, Any]) -> None:
    for job in _list(spec.get("replicatedJobs")):
        step = get(job, "template", "metadata", "labels", ANCESTOR)
        if step not in INITIALIZERS:
            continue
        job["replicas"] = 1
        config = _mapping(initializer.get(INITIALIZERS[step]))
        for container in _containers(job, "containers"):
            if container.get("name") != step or not config:
                continue
            env = container.setdefault("env", [])
            if config.get("storageUri") is not None:
                upsert(env, {"name": "STORAGE_URI", "value": config["storageUri"]}, "name")
            for var in _list(config.get("env")):
                upsert(env, var, "name")
            if secret := get(config, "secretRef", "name"):
                container.setdefault("envFrom", []).append({"secretRef": {"name": secret}})


def upsert(items: list[Any], item: Any, key: str) -> None:
    """The Trainer's apply.Upsert*: replace the item with the same key, else append."""
    at = _index_by(items, key, _mapping(item).get(key))
    if at is None:
        items.append(copy.deepcopy(item))
    else:
        items[at] = copy.deepcopy(item)


def jobset_jobs(jobset: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(replicated job index, the first Job) JobSet's controller creates per replicated job: named
    `<jobset>-<replicated job>-0`, its template's spec after JobSet's defaulting webhook (completionMode
    Indexed, the pods' restartPolicy OnFailure), the JobSet's labels on it and on its pods."""
    name = get(jobset, "metadata", "name")
    for index, job in enumerate(_list(get(jobset, "spec", "replicatedJobs"))):
        template = _mapping(get(job, "template"))
        rjob = _mapping(job).get("name")
        labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                  "jobset.sigs.k8s.io/job-index": "0"}
        spec = copy.deepcopy(_mapping(template.get("spec")))
        spec.setdefault("completionMode", "Indexed")
        pod = _mapping(spec.get("template"))
        if isinstance(pod.get("spec"), dict):
            pod["spec"].setdefault("restartPolicy", "OnFailure")
        pod["metadata"] = {**_mapping(pod.get("metadata")),
                           "labels": {**_mapping(get(pod, "metadata", "labels")), **labels}}
        spec["template"] = pod
        metadata = {**_mapping(template.get("metadata")), "name": f"{name}-{rjob}-0",
                    "labels": {**_mapping(get(template, "metadata", "labels")), **labels}}
        yield index, {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def _containers(job: Any, key: str) -> list[dict[str, Any]]:
    return [c for c in _list(get(job, "template", "spec", "template", "spec", key)) if isinstance(c, dict)]


def _index_by(items: list[Any], key: str, value: Any) -> int | None:
    if value is None:
        return None
    return next((i for i, item in enumerate(items) if _mapping(item).get(key) == value), None)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
