"""Checks a schema cannot express: what the operators and the apiserver's own validation would reject,
and what is legal but a classic source of failed training runs (warnings)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.kube.objects import GPU_RESOURCE as GPU
from kubetrain.rules.findings import Finding, get
from kubetrain.validate import operators
from kubetrain.validate.worldsize import world_size_findings

OPERATOR_RESTART_POLICIES = {"Always", "OnFailure", "Never", "ExitCode"}
PYTORCH_REPLICA_TYPES = {"Master", "Worker"}


def semantic_findings(obj: dict[str, Any]) -> list[Finding]:
    kind = obj.get("kind")
    findings = list(operators.resource_findings(obj))
    findings += list(_image_findings(obj))
    findings += list(world_size_findings(obj))
    if kind == "PyTorchJob":
        findings += list(_pytorchjob_findings(obj))
        findings += list(operators.pytorchjob_webhook(obj))
        findings += list(operators.pytorchjob_later(obj))
    elif kind == "TrainJob":
        findings += list(_trainjob_findings(obj))
        findings += list(operators.trainjob_webhook(obj))
    return findings


def pytorchjob_operator_errors(obj: dict[str, Any]) -> list[Finding]:
    """The training-operator's create-time refusals of a PyTorchJob (its webhook: replica types and counts, the
    `pytorch` container, the name; its Service): what `validate --exact` adds to the API server's verdict."""
    return [f for f in (*_pytorchjob_findings(obj), *operators.pytorchjob_webhook(obj)) if f.severity == "error"]


def misplaced_run_policies(obj: Any, path: PathKey = ()) -> list[PathKey]:
    """Every `runPolicy` key of a PyTorchJob that is not spec.runPolicy (a classic user error)."""
    found: list[PathKey] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            child = (*path, key)
            if key == "runPolicy" and child != ("spec", "runPolicy"):
                found.append(child)
            found += misplaced_run_policies(value, child)
    elif isinstance(obj, list):
        for index, item in enumerate(obj):
            found += misplaced_run_policies(item, (*path, index))
    return found


def _pytorchjob_findings(obj: dict[str, Any]) -> Iterator[Finding]:
    for path in misplaced_run_policies(obj):
        yield Finding(path, "runPolicy belongs directly under spec (spec.runPolicy)")
    spec: dict[str, Any] = obj["spec"] if isinstance(obj.get("spec"), dict) else {}
    replicas = spec.get("pytorchReplicaSpecs")
    if isinstance(replicas, dict):
        for replica_type, replica in replicas.items():
            if isinstance(replica, dict):
                yield from _replica_findings(replica_type, replica)
        if "Master" not in replicas and not spec.get("elasticPolicy"):
            yield Finding(("spec", "pytorchReplicaSpecs"), "a PyTorchJob without elasticPolicy and without a Master "
                          "replica: the workers' MASTER_ADDR names the Master's Service, so they wait for a rendezvous "
                          "that never comes", "warning")
    run_policy: dict[str, Any] = spec["runPolicy"] if isinstance(spec.get("runPolicy"), dict) else {}
    if "ttlSecondsAfterFinished" not in run_policy:
        yield Finding(("spec", "runPolicy"), "no ttlSecondsAfterFinished: finished jobs and their pods are never "
                      "cleaned up", "warning")


def _replica_findings(replica_type: str, replica: dict[str, Any]) -> Iterator[Finding]:
    base: PathKey = ("spec", "pytorchReplicaSpecs", replica_type)
    if replica_type not in PYTORCH_REPLICA_TYPES:
        yield Finding(base, f"replica type must be Master or Worker, not {replica_type!r}")
    if replica_type == "Master" and replica.get("replicas") != 1:  # v1.9.4's webhook: a missing count too
        found = "none" if replica.get("replicas") is None else repr(replica.get("replicas"))
        yield Finding((*base, "replicas"), f"Master must have exactly 1 replica, not {found}")
    policy = replica.get("restartPolicy")
    if policy is not None and (not isinstance(policy, str) or policy not in OPERATOR_RESTART_POLICIES):
        allowed = ", ".join(sorted(OPERATOR_RESTART_POLICIES))
        yield Finding((*base, "restartPolicy"), f"{policy!r} is not one of {allowed}" + (
            " (the API server accepts it, but the operator's pod creation would fail)" if isinstance(policy, str)
            else ""))
    pod_spec = get(replica, "template", "spec")
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    if isinstance(containers, list):
        names = [c.get("name") for c in containers if isinstance(c, dict)]
        if "pytorch" not in names:
            yield Finding((*base, "template", "spec", "containers"),
                          f"no container named 'pytorch' (found {', '.join(map(str, names)) or 'none'}): the "
                          "operator injects the rendezvous env and port only into that container")
        if _requests_gpus(containers) and not _has_memory_shm(pod_spec):
            yield Finding((*base, "template", "spec", "volumes"), "GPU pod without a memory-backed /dev/shm "
                          "(emptyDir medium: Memory): NCCL and DataLoader workers may run out of shared memory",
                          "warning")


def _trainjob_findings(obj: dict[str, Any]) -> Iterator[Finding]:
    trainer = get(obj, "spec", "trainer")
    if not isinstance(trainer, dict) or not _gpu_count(trainer.get("resourcesPerNode")):
        return
    patches = get(obj, "spec", "runtimePatches")
    pod_specs = [get(job, "template", "spec", "template", "spec")
                 for patch in (patches if isinstance(patches, list) else [])
                 for job in _list(get(patch, "trainingRuntimeSpec", "template", "spec", "replicatedJobs"))]
    if not any(isinstance(p, dict) and _has_memory_shm(p) for p in pod_specs):
        yield Finding(("spec", "runtimePatches"), "GPU TrainJob without a memory-backed /dev/shm (emptyDir "
                      "medium: Memory) in its runtimePatches", "warning")


def _image_findings(obj: Any, path: PathKey = ()) -> Iterator[Finding]:
    if isinstance(obj, dict):
        image = obj.get("image")
        if isinstance(image, str) and ("name" in obj or path[-1:] == ("trainer",)) and _floating_tag(image):
            yield Finding((*path, "image"), f"image {image!r} has no fixed tag (:latest or none): pods of one job "
                          "may run different code; pin a tag or digest", "warning")
        for key, value in obj.items():
            yield from _image_findings(value, (*path, key))
    elif isinstance(obj, list):
        for index, item in enumerate(obj):
            yield from _image_findings(item, (*path, index))


def _floating_tag(image: str) -> bool:
    if "@sha256:" in image:
        return False
    last = image.rsplit("/", 1)[-1]
    return ":" not in last or last.endswith(":latest")


def _requests_gpus(containers: list[Any]) -> bool:
    return any(isinstance(c, dict) and _gpu_count(c.get("resources")) for c in containers)


def _gpu_count(resources: Any) -> int:
    if not isinstance(resources, dict):
        return 0
    for section in ("limits", "requests"):
        value = get(resources, section, GPU)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return 0
    return 0


def _has_memory_shm(pod_spec: dict[str, Any]) -> bool:
    memory_volumes = {v.get("name") for v in _list(pod_spec.get("volumes"))
                      if isinstance(v, dict) and isinstance(v.get("name"), str)
                      and get(v, "emptyDir", "medium") == "Memory"}
    mounts = [m for c in _list(pod_spec.get("containers")) if isinstance(c, dict)
              for m in _list(c.get("volumeMounts")) if isinstance(m, dict)]
    return any(m.get("mountPath") == "/dev/shm" and isinstance(m.get("name"), str) and m["name"] in memory_volumes
               for m in mounts)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
