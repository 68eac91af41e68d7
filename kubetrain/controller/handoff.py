"""`kubetrain submit --controller` and kubetrain.api.submit_to_controller: hand the TrainingJob itself to the
cluster's controller.

The spec has been loaded, checked and rendered exactly as for a direct submit; what goes out is the
TrainingJob as the user wrote it (unset fields stay unset, so the controller's defaults apply), server-side
applied with the CLI's field manager. A local `code.path` is resolved here, where it exists: its ConfigMap
(the same content-addressed one a direct submit creates) is uploaded and referenced from the annotation
kubetrain.dev/code (name + the key → path items), which the controller reads to render the same mount.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubetrain.controller.crd import NAME
from kubetrain.controller.reconcile import CODE_ANNOTATION
from kubetrain.errors import ClusterError, Problem, SpecError, UsageError
from kubetrain.jobs import apply, targets
from kubetrain.jobspec.load import LoadedSpec
from kubetrain.kube import watch
from kubetrain.kube.connection import Connection
from kubetrain.kube.errors import cluster_errors
from kubetrain.kube.rest import Rest, path_of
from kubetrain.render.loaded import render_loaded


@dataclass(frozen=True)
class HandedOver:
    """The TrainingJob as applied (for a client dry run: as it would be)."""

    namespace: str
    name: str
    object: dict[str, Any]


def submit_training_job(connection: Connection, loaded: LoadedSpec, namespace: str, dry_run: str = "none",
                        overrides: dict[str, str] | None = None) -> HandedOver:
    """Render the spec as the controller will (with `overrides`: --image, --target), so that a bad value is
    refused here, then hand the TrainingJob and its code ConfigMap over. dry_run: none, client or server."""
    if loaded.job.spec.gpu_via != "plugin":
        raise UsageError(f"spec.gpus.via: {loaded.job.spec.gpu_via} cannot be combined with --controller (the "
                         "controller creates only the job, not its ResourceClaimTemplates); submit without it")
    target = (overrides or {}).get("target")
    rendered = render_loaded(loaded, namespace=namespace, image=(overrides or {}).get("image"),
                             target=None if target == "auto" else target)
    body = training_job(loaded, namespace, rendered if loaded.job.spec.code else [], overrides)
    configmaps = [o for o in rendered[:-1] if o["kind"] == "ConfigMap"]
    applied = hand_over(connection.rest, body, configmaps, None if dry_run == "none" else dry_run)
    return HandedOver(namespace, str(applied["metadata"]["name"]), applied)


def training_job(loaded: LoadedSpec, namespace: str, rendered: list[dict[str, Any]],
                 overrides: dict[str, str] | None = None) -> dict[str, Any]:
    """The object to apply. `rendered`: the CLI's render of the spec (used only for the code ConfigMap);
    `overrides`: spec fields the command line sets (--image, --target), as a direct submit applies them."""
    body = loaded.job.model_dump(mode="json", by_alias=True, exclude_unset=True)
    body["metadata"] = {**body["metadata"], "namespace": namespace}
    body["spec"] = {**body["spec"], **(overrides or {})}
    configmaps = [o for o in rendered[:-1] if o.get("kind") == "ConfigMap"]
    if configmaps:
        volume = code_volume(rendered[-1])
        if volume is None:  # the renderer mounts every code ConfigMap as volume `code`
            raise SpecError([Problem("spec.code", "rendered job has no code volume", loaded.source)])
        reference = {"configMap": configmaps[0]["metadata"]["name"], "items": volume["items"]}
        annotations = {**body["metadata"].get("annotations", {}), CODE_ANNOTATION: json.dumps(reference)}
        body["metadata"]["annotations"] = annotations
    return body


def code_volume(obj: Any) -> dict[str, Any] | None:
    """The `configMap` of the pod volume named `code`, wherever the child kind keeps its pod template."""
    if isinstance(obj, dict):
        if obj.get("name") == "code" and isinstance(obj.get("configMap"), dict):
            return dict(obj["configMap"])
        obj = list(obj.values())
    if isinstance(obj, list):
        return next((found for item in obj if (found := code_volume(item)) is not None), None)
    return None


def hand_over(rest: Rest, body: dict[str, Any], configmaps: list[dict[str, Any]], dry_run: str | None
              ) -> dict[str, Any]:
    """Server-side apply the code ConfigMap, then the TrainingJob, then make the TrainingJob own the ConfigMap
    (the garbage collector deletes it with the job). Client dry run: return the TrainingJob unchanged."""
    if dry_run == "client":
        return body
    with cluster_errors("discover the kubetrain.dev API"):
        if not targets.served(rest, targets.TRAININGJOB):
            raise ClusterError(f"--controller: the cluster does not serve {NAME}: install the operator with "
                               "`kubetrain controller install` (docs/operator.md), or submit without --controller")
    for configmap in configmaps:  # first: the controller reads it as soon as the TrainingJob exists
        apply.apply_configmap(rest, configmap, dry_run is not None)
    applied = apply.apply_object(rest, targets.TRAININGJOB, body, dry_run=dry_run is not None)
    for configmap in configmaps:
        apply.apply_configmap(rest, apply.with_owner(configmap, applied), dry_run is not None)
    return applied


FINAL = ("Succeeded", "Failed", "Invalid")


def _current(obj: dict[str, Any]) -> dict[str, Any]:
    """The status, if the controller has reconciled this generation of the spec (else an old child's)."""
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    return dict(status) if status.get("observedGeneration") == generation else {}


def wait_trainingjob(rest: Rest, namespace: str, name: str, timeout: float | None, until: str,
                     on_retry: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The TrainingJob once the controller has reconciled its current spec and `until` holds: "child" (its
    child job exists, or it ended without one: Invalid) or "final" (Succeeded, Failed or Invalid).
    WaitTimeout after `timeout`; a deleted TrainingJob is a ClusterError."""
    def check(cache: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any] | None:
        obj = cache.get((namespace, name))
        if obj is None:
            raise ClusterError(f"TrainingJob {namespace}/{name} was deleted while waiting for it")
        status = _current(obj)
        if status.get("phase") in FINAL or (until == "child" and status.get("target") and
                                            any(c.get("kind") != "ConfigMap" for c in status.get("children") or [])):
            return obj
        return None

    list_fn = watch.rest_list(rest, path_of(targets.TRAININGJOB.group, targets.TRAININGJOB.version,
                                           targets.TRAININGJOB.plural, namespace))
    with cluster_errors(f"watch trainingjobs in namespace {namespace}"):
        return watch.wait_for(list_fn, check, timeout=timeout, on_retry=on_retry, what=f"TrainingJob {name}",
                              field_selector=f"metadata.name={name}")


def diverged_of(obj: dict[str, Any]) -> str | None:
    """`diverged at step N: loss nan` when the TrainingJob's Diverged condition is True, else None."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if (cond.get("type"), cond.get("status")) == ("Diverged", "True"):
            return str(cond.get("message") or "diverged")
    return None


def outcome(obj: dict[str, Any]) -> tuple[str, str]:
    """(phase, why) of a TrainingJob: why is the message of its Valid=False or Failed condition."""
    status = obj.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    for cond in status.get("conditions") or []:
        if (cond.get("type"), cond.get("status")) in {("Valid", "False"), ("Failed", "True")}:
            return phase, str(cond.get("message") or cond.get("reason") or "")
    return phase, ""
