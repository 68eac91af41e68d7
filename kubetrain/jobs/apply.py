"""Apply a rendered job: server-side apply (field manager `kubetrain`), no-op when unchanged, --replace.

Order: the job first, then the code ConfigMap (and a DRA job's ResourceClaimTemplates), created already owned
by the job (ownerReference with blockOwnerDeletion), so the garbage collector removes them with the job. A
DRA TrainJob's TrainingRuntime goes first (the TrainJob names it, so it exists when the Trainer reconciles) and
gets its owner once the job exists. Job-first means no moment where
a ConfigMap exists without an owner: if kubetrain dies between the two writes, the job's pods wait in
ContainerCreating for the volume (the kubelet retries the mount), and re-submitting the unchanged spec
creates the missing ConfigMap. ConfigMap-first would instead leak an ownerless ConfigMap on a failed job
create (e.g. a webhook or quota rejection) and need a second write to add the owner.

Unchanged vs changed is decided by the `kubetrain.dev/spec-hash` annotation the renderer sets (a hash of
the spec, code digest, image and cloud profile), not by diffing what the operator defaulted.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from kubetrain import jobs
from kubetrain.errors import ClusterError
from kubetrain.jobs.targets import Target
from kubetrain.kube import watch
from kubetrain.kube.errors import NotFound, cluster_errors
from kubetrain.kube.objects import meta_of
from kubetrain.kube.rest import Rest, path_of
from kubetrain.render.context import SPEC_HASH_ANNOTATION

FIELD_MANAGER = "kubetrain"
APPLY_PATCH = "application/apply-patch+yaml"
CREATED, UNCHANGED, REPLACED = "created", "unchanged", "replaced"
# What render makes besides the job: (group, version, plural) by kind.
COMPANIONS = {"ConfigMap": ("", "v1", "configmaps"),
              "ResourceClaimTemplate": ("resource.k8s.io", "v1", "resourceclaimtemplates"),
              "TrainingRuntime": ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"),
              "Pod": ("", "v1", "pods")}  # `kubetrain tensorboard --cluster`
BEFORE_THE_JOB = {"TrainingRuntime"}


@dataclass(frozen=True)
class ApplyResult:
    action: str  # created | unchanged | replaced
    objects: list[dict[str, Any]] = field(default_factory=list)  # as the server returned them (dry run: would)
    dry_run: str | None = None

    def message(self, target: Target, name: str, namespace: str) -> str:
        suffix = f" ({self.dry_run} dry run)" if self.dry_run else ""
        if self.action == UNCHANGED:
            return f"{target.kind} {namespace}/{name} unchanged: same spec already submitted, nothing to do{suffix}"
        return f"{target.kind} {namespace}/{name} {self.action}{suffix}"


def spec_hash(obj: dict[str, Any]) -> str | None:
    return (meta_of(obj).get("annotations") or {}).get(SPEC_HASH_ANNOTATION)


def submit(rest: Rest, target: Target, objects: list[dict[str, Any]], *, dry_run: str | None = None,
           replace: bool = False, timeout: float | None = 300) -> ApplyResult:
    """Create the job (and its ConfigMaps), or do nothing if this spec is already there, or replace it."""
    job = objects[-1]
    first = [o for o in objects[:-1] if o["kind"] in BEFORE_THE_JOB]
    configmaps = [o for o in objects[:-1] if o["kind"] not in BEFORE_THE_JOB]
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    existing = jobs.get(rest, target, namespace, name)
    if existing is not None and not replace:
        if spec_hash(existing) == spec_hash(job) and spec_hash(job):
            applied = [existing] if dry_run else [existing, *_ensure_configmaps(rest, existing, [*first, *configmaps])]
            return ApplyResult(UNCHANGED, applied, dry_run)
        raise ClusterError(_changed_message(target, existing, job))
    action = CREATED
    if existing is not None:
        action = REPLACED
        if not dry_run:
            jobs.delete(rest, target, namespace, name, propagation="Foreground")
            jobs.wait_gone(rest, target, namespace, name, timeout)
    if dry_run == "client":
        return ApplyResult(action, objects, dry_run)
    # A server dry run of a replace validates the new object as an update of the old one (hence force).
    server_dry = dry_run == "server"
    for companion in first:  # without an owner until the job exists
        apply_configmap(rest, companion, dry_run is not None)
    created = apply_object(rest, target, job, dry_run=server_dry, force=server_dry and existing is not None)
    owned = [with_owner(cm, created) for cm in [*first, *configmaps]]
    return ApplyResult(action, [*[apply_configmap(rest, cm, dry_run is not None) for cm in owned], created], dry_run)


def _changed_message(target: Target, existing: dict[str, Any], job: dict[str, Any]) -> str:
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    old = spec_hash(existing)
    why = f"a different spec (spec hash {old} → {spec_hash(job)})" if old else "a spec not submitted by kubetrain"
    return (f"{target.kind} {namespace}/{name} already exists with {why}: re-submit with --replace to delete "
            f"and recreate it (stops its pods), or change metadata.name")


def apply_object(rest: Rest, target: Target, job: dict[str, Any], dry_run: bool = False,
                 force: bool = False) -> dict[str, Any]:
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    with cluster_errors(f"apply {target.resource} {name} in namespace {namespace}"):
        return _apply(rest, path_of(target.group, target.version, target.plural, namespace, name), job, dry_run,
                      force)


def _apply(rest: Rest, path: str, body: dict[str, Any], dry_run: bool, force: bool = False) -> dict[str, Any]:
    """Server-side apply (a JSON body is valid YAML): 201 when it creates, 200 when it updates."""
    query = {"fieldManager": FIELD_MANAGER, "force": force or None, "dryRun": "All" if dry_run else None}
    return rest.json("PATCH", path, query, body, content_type=APPLY_PATCH)


def with_owner(configmap: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap owned by the job (no owner if the job has no uid yet, as in a client dry run)."""
    uid = meta_of(owner).get("uid")
    if not uid:
        return configmap
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
           "uid": uid, "blockOwnerDeletion": True}
    return {**configmap, "metadata": {**configmap["metadata"], "ownerReferences": [ref]}}


def apply_configmap(rest: Rest, configmap: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    """A job's companion object: its code ConfigMap, a ResourceClaimTemplate, a TrainingRuntime, its
    TensorBoard pod."""
    name, namespace, kind = configmap["metadata"]["name"], configmap["metadata"]["namespace"], configmap["kind"]
    group, version, plural = COMPANIONS[kind]
    with cluster_errors(f"apply {plural} {name} in namespace {namespace}"):
        return _apply(rest, path_of(group, version, plural, namespace, name), configmap, dry_run)


def _ensure_configmaps(rest: Rest, job: dict[str, Any], configmaps: list[dict[str, Any]]
                       ) -> list[dict[str, Any]]:
    """An unchanged job's ConfigMaps exist (they may not, if a submit died between its two writes)."""
    out = []
    for cm in configmaps:
        name, namespace = cm["metadata"]["name"], cm["metadata"]["namespace"]
        group, version, plural = COMPANIONS[cm["kind"]]
        with cluster_errors(f"get {plural} {name} in namespace {namespace}"):
            try:
                out.append(rest.get(path_of(group, version, plural, namespace, name)))
                continue
            except NotFound:
                pass
        out.append(apply_configmap(rest, with_owner(cm, job)))
    return out


def delete_configmaps(rest: Rest, namespace: str, job_name: str, label: str) -> int:
    """Delete the job's ConfigMaps by label (normally the garbage collector does it via the owner)."""
    configmaps = path_of("", "v1", "configmaps", namespace)
    with cluster_errors(f"delete configmaps of {job_name} in namespace {namespace}"):
        items, _ = watch.list_objects(watch.rest_list(rest, configmaps), label_selector=f"{label}={job_name}")
        for cm in items:
            with contextlib.suppress(NotFound):
                rest.request("DELETE", f"{configmaps}/{cm['metadata']['name']}")
    return len(items)
