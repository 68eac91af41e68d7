"""Where each kind keeps its pod templates, and which stage creates the pods from them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.k8s.base import mapping, named
from kubetrain.rules.runtimes import runtime_of

WORKLOADS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "ReplicationController", "PodTemplate")


@dataclass(frozen=True)
class Template:
    path: PathKey  # of the PodTemplateSpec (metadata + spec)
    template: Any
    stage: str | None  # None: the API server checks it with the object itself
    partial: bool = False  # a Trainer runtime patch, merged into the runtime's template
    sets_restart_policy: bool = False  # the operator replaces the template's restartPolicy
    runtime_volumes: frozenset[str] | None = None  # of a patch: the volumes the runtime's pods have, if known


def pod_templates(obj: dict[str, Any]) -> Iterator[Template]:
    kind, spec = obj.get("kind"), mapping(obj.get("spec"))
    if kind == "Pod":
        yield Template((), {"metadata": obj.get("metadata"), "spec": spec}, None)
    elif kind in WORKLOADS:
        yield Template(("spec", "template") if kind != "PodTemplate" else ("template",),
                       spec.get("template") if kind != "PodTemplate" else obj.get("template"), None)
    elif kind == "CronJob":
        yield Template(("spec", "jobTemplate", "spec", "template"),
                       mapping(mapping(spec.get("jobTemplate")).get("spec")).get("template"), None)
    elif kind == "PyTorchJob":
        for role, replica in mapping(spec.get("pytorchReplicaSpecs")).items():
            yield Template(("spec", "pytorchReplicaSpecs", role, "template"), mapping(replica).get("template"),
                           "the operator's pod creation would fail", sets_restart_policy=True)
    elif kind == "JobSet":
        yield from _replicated_jobs(spec, ("spec",), "JobSet's Job creation would fail")
    elif kind in ("ClusterTrainingRuntime", "TrainingRuntime"):
        yield from _replicated_jobs(mapping(mapping(spec.get("template")).get("spec")), ("spec", "template", "spec"),
                                    "every TrainJob using this runtime would fail to start")
    elif kind == "TrainJob":
        runtime = runtime_of(spec.get("runtimeRef"))
        for patch, where in named(spec.get("runtimePatches"), ("spec", "runtimePatches")):
            base = (*where, "trainingRuntimeSpec", "template", "spec")
            jobs = mapping(mapping(mapping(patch.get("trainingRuntimeSpec")).get("template")).get("spec"))
            yield from _replicated_jobs(jobs, base, "the Trainer's JobSet would fail to create its pods",
                                        partial=True, runtime_volumes=runtime.volumes if runtime else None)


def _replicated_jobs(spec: dict[str, Any], path: PathKey, stage: str, *, partial: bool = False,
                     runtime_volumes: frozenset[str] | None = None) -> Iterator[Template]:
    for job, where in named(spec.get("replicatedJobs"), (*path, "replicatedJobs")):
        yield Template((*where, "template", "spec", "template"),
                       mapping(mapping(job.get("template")).get("spec")).get("template"), stage, partial,
                       runtime_volumes=runtime_volumes)
