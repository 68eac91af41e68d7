"""World size against GPUs in manifests: every replica's nvidia.com/gpu limit against the process count that
torchrun will start there (kubetrain.rules.worldsize has the rule itself).

- PyTorchJob: `spec.nprocPerNode` (or `elasticPolicy.nProcPerNode`); unset, training-operator v1 defaults it
  to `auto` (pytorch_defaults.go). The GPUs are the `pytorch` container's limit in each replica.
- TrainJob: `spec.trainer.numProcPerNode` against `resourcesPerNode`. Trainer derives an unset count from
  `resourcesPerNode` alone, so GPUs that only the runtime declares give one process per node
  (kubeflow/trainer#3974): warned about when `resourcesPerNode` names no GPU.
- ClusterTrainingRuntime/TrainingRuntime: `mlPolicy.torch.numProcPerNode` against the `node` container.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.command import torchrun_in
from kubetrain.rules.findings import Finding, get
from kubetrain.rules.quantity import parse_quantity
from kubetrain.rules.worldsize import process_count, procs_gpus_problem

GPU = "nvidia.com/gpu"
RUNTIME_KINDS = {"ClusterTrainingRuntime", "TrainingRuntime"}
TRAINER_CONTAINER = "node"  # Trainer v2's trainer container and replicated job name


def world_size_findings(obj: dict[str, Any]) -> Iterator[Finding]:
    kind = obj.get("kind")
    if kind == "PyTorchJob":
        yield from _pytorchjob(obj)
    elif kind == "TrainJob":
        yield from _trainjob(obj)
    elif kind in RUNTIME_KINDS:
        yield from _runtime(obj)


def gpu_limit(resources: Any) -> int | None:
    """The nvidia.com/gpu count of a resources block (limits, else requests), None when it names none."""
    for section in ("limits", "requests"):
        value = get(resources, section, GPU)
        if isinstance(value, int | str) and not isinstance(value, bool):
            try:
                return int(parse_quantity(value))
            except ValueError:
                return None  # the schema reports it
    return None


def _pytorchjob(obj: dict[str, Any]) -> Iterator[Finding]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    path: PathKey = ("spec", "nprocPerNode")
    procs = spec.get("nprocPerNode")
    if procs is None and get(spec, "elasticPolicy", "nProcPerNode") is not None:
        path, procs = ("spec", "elasticPolicy", "nProcPerNode"), get(spec, "elasticPolicy", "nProcPerNode")
    replicas = spec.get("pytorchReplicaSpecs")
    seen: set[tuple[PathKey, str]] = set()
    for replica_type, replica in (replicas.items() if isinstance(replicas, dict) else []):
        containers = get(replica, "template", "spec", "containers")
        if not isinstance(containers, list) or not containers:
            continue
        index = _trainer_index(containers, "pytorch")
        container = containers[index]
        if not isinstance(container, dict):
            continue
        gpus = gpu_limit(container.get("resources")) or 0
        container_path: PathKey = ("spec", "pytorchReplicaSpecs", replica_type, "template", "spec", "containers",
                                   index)
        count = _replica_count(container, procs, path, container_path)
        if count is None or (found := procs_gpus_problem(count[0], gpus)) is None:
            continue
        _, at, text = count
        if (at, found[1]) in seen:
            continue
        seen.add((at, found[1]))
        where = f"{replica_type} ({gpus} GPU(s) per pod)"
        yield Finding(at, f"{text} for {where}: {found[1]}" if text else f"{found[1]} [{where}]", found[0])


def _replica_count(container: Any, procs: object, path: PathKey, container_path: PathKey
                   ) -> tuple[object, PathKey, str] | None:
    """(the count torchrun will use, where it is set, how to name it), or None where torchrun does not run."""
    torchrun = torchrun_in(_words(container))
    flag = torchrun.flag("--nproc-per-node") if torchrun else None
    if flag is not None:  # torchrun's own flag wins over PET_NPROC_PER_NODE
        return flag, container_path, f"--nproc-per-node {flag} in the command"
    if procs is not None:
        return procs, path, ""
    if torchrun is None:
        return None  # PET_NPROC_PER_NODE only counts where torchrun reads it
    return "auto", container_path, "spec.nprocPerNode is unset (the operator's default: auto)"


def _words(container: Any) -> list[str]:
    if not isinstance(container, dict):
        return []
    words: list[str] = []
    for key in ("command", "args"):
        value = container.get(key)
        words += [w for w in value if isinstance(w, str)] if isinstance(value, list) else []
    return words


def _trainer_index(containers: list[Any], name: str) -> int:
    names = [c.get("name") if isinstance(c, dict) else None for c in containers]
    return names.index(name) if name in names else 0


def _trainjob(obj: dict[str, Any]) -> Iterator[Finding]:
    trainer = get(obj, "spec", "trainer")
    if not isinstance(trainer, dict):
        return
    procs = trainer.get("numProcPerNode")
    resources = trainer.get("resourcesPerNode")
    gpus = gpu_limit(resources)
    if gpus is None:
        if resources is not None and procs in (None, "auto"):
            yield Finding(("spec", "trainer", "resourcesPerNode"), "names no nvidia.com/gpu and numProcPerNode is "
                          "unset: Trainer derives the process count from resourcesPerNode alone, so GPUs that "
                          "only the runtime gives the pods get one process per node (kubeflow/trainer#3974); set "
                          "numProcPerNode to the pods' GPU count (or nvidia.com/gpu here)", "warning")
        return
    if _numeric(procs) and (found := procs_gpus_problem(procs, gpus)):
        yield Finding(("spec", "trainer", "numProcPerNode"), f"{found[1]} [resourcesPerNode: {gpus} GPU(s)]",
                      found[0])


def _numeric(procs: object) -> bool:
    return isinstance(process_count(procs), int)


def _runtime(obj: dict[str, Any]) -> Iterator[Finding]:
    procs = get(obj, "spec", "mlPolicy", "torch", "numProcPerNode")
    jobs = get(obj, "spec", "template", "spec", "replicatedJobs")
    if not _numeric(procs) or not isinstance(jobs, list):
        return  # Trainer resolves auto/cpu/gpu from the resources (capped to the CPU limit, kubeflow/trainer#2492)
    for job in jobs:
        containers = get(job, "template", "spec", "template", "spec", "containers")
        names = [c.get("name") for c in containers if isinstance(c, dict)] if isinstance(containers, list) else []
        if not isinstance(containers, list) or TRAINER_CONTAINER not in names:
            continue
        gpus = gpu_limit(containers[names.index(TRAINER_CONTAINER)].get("resources")) or 0
        if gpus and (found := procs_gpus_problem(procs, gpus)):
            yield Finding(("spec", "mlPolicy", "torch", "numProcPerNode"),
                          f"{found[1]} [replicatedJob {job.get('name')!r}: {gpus} GPU(s) per pod]", found[0])
            return
