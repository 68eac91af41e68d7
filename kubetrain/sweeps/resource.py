"""The Sweep resource (kind Sweep, kubetrain.dev/v1alpha1) and a kubetrain.yaml with a `sweep` section, each
made from the other, and the TrainingJob of one of its trials. Pure: the controller and the CLI share these.

A Sweep's spec is the `sweep` section with the job's spec under `trial`:

    spec: {parameters: [...], objective: {...}, trials: 6, parallelism: 2, trial: {image: ..., train: ...}}

`spec.stop: true` (what `kubetrain sweep stop` sets) starts no more trials and stops the running ones.
"""

from __future__ import annotations

from typing import Any

from kubetrain.jobspec.load import validate_data
from kubetrain.jobspec.model import TrainingJob
from kubetrain.kube.objects import OBJECTIVE_ANNOTATION, SWEEP_LABEL
from kubetrain.sweeps.trial import trial_document

GROUP, VERSION, KIND, PLURAL = "kubetrain.dev", "v1alpha1", "Sweep", "sweeps"
RESERVED = ("trial", "stop")


def sweep_of(job: dict[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the Sweep a trial's TrainingJob belongs to (its label), else None."""
    meta = job.get("metadata") or {}
    name = (meta.get("labels") or {}).get(SWEEP_LABEL)
    return (str(meta.get("namespace") or ""), str(name)) if name else None


def sweep_resource(job: TrainingJob, namespace: str | None = None) -> dict[str, Any]:
    """The Sweep object of a kubetrain.yaml that has a sweep section."""
    data = job.model_dump(mode="json", by_alias=True, exclude_unset=True)
    metadata = {k: v for k, v in data["metadata"].items() if k in ("name", "labels", "annotations")}
    if namespace or job.metadata.namespace:
        metadata["namespace"] = namespace or job.metadata.namespace
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": metadata,
            "spec": {**data["sweep"], "trial": data["spec"]}}


def job_document(sweep: dict[str, Any]) -> dict[str, Any]:
    """The kubetrain.yaml data of a Sweep object (its spec's `trial` as the job's spec)."""
    meta = sweep.get("metadata") or {}
    spec = dict(sweep.get("spec") or {})
    metadata = {k: meta[k] for k in ("name", "namespace") if meta.get(k)}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": metadata,
            "spec": spec.get("trial") or {}, "sweep": {k: v for k, v in spec.items() if k not in RESERVED}}


def load_sweep(sweep: dict[str, Any]) -> TrainingJob:
    """The Sweep object as a validated job with its sweep section (a SpecError names the field)."""
    name = (sweep.get("metadata") or {}).get("name", "?")
    return validate_data(job_document(sweep), {}, f"Sweep {name}")


def trial_resource(job: TrainingJob, sweep: dict[str, Any], number: int, params: dict[str, Any]
                   ) -> dict[str, Any]:
    """Trial `number`'s TrainingJob, owned (controller) by the Sweep: deleting the Sweep deletes it."""
    assert job.sweep is not None
    meta = sweep["metadata"]
    data = trial_document(job, params, number)
    data["metadata"].update(
        namespace=meta["namespace"],
        annotations={**(data["metadata"].get("annotations") or {}), OBJECTIVE_ANNOTATION: job.sweep.objective.metric},
        ownerReferences=[{"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta["name"],
                          "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}])
    return data
