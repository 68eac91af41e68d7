"""One TrainingJob → its desired child and its status. Pure functions of the observed objects (no I/O).

The same pipeline as the CLI and kubetrain.api: `kubetrain.jobspec.load.validate_data` (what `load_spec` runs on
a file: typed model + cross-field checks, every problem at once, the same one-line messages), then
`kubetrain.render.loaded.render_loaded` (what `render`/`submit` run: target re-checks, then the renderer),
given the code read from the cluster instead of a directory. `loop` does the I/O.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubetrain.controller.crd import GROUP, KIND, VERSION
from kubetrain.errors import Problem, RenderError, SpecError
from kubetrain.jobspec.load import LoadedSpec, validate_data
from kubetrain.jobspec.model import TrainingJob
from kubetrain.kube.objects import meta_of
from kubetrain.render import resolve_target
from kubetrain.render.code import CodeBundle
from kubetrain.render.context import SPEC_HASH_ANNOTATION, code_configmap_name
from kubetrain.render.loaded import render_loaded

API_VERSION = f"{GROUP}/{VERSION}"
UPDATE_POLICY_ANNOTATION = "kubetrain.dev/update-policy"
CODE_ANNOTATION = "kubetrain.dev/code"  # {"configMap": name, "items": [{key, path}]}, set by submit
CodeLookup = Callable[[str, str], dict[str, Any] | None]  # (namespace, ConfigMap name) → ConfigMap or None
# recreate: the new child starts fresh (its own checkpoint directory); continue: it resumes the old child's
# checkpoints (the runtime refuses, in one line, a checkpoint that does not fit the new model).
POLICIES = ("report", "recreate", "continue")
# Annotations the tools around an object add; they must not be copied onto the child's pods.
FOREIGN_ANNOTATION_PREFIXES = ("kubectl.kubernetes.io/", "kubetrain.dev/", "argocd.argoproj.io/",
                               "kustomize.toolkit.fluxcd.io/")
UNRESOLVED_CODE = ("a local directory cannot be read in the cluster: submit with `kubetrain submit "
                   "--controller`, which uploads the code ConfigMap, or bake the code into spec.image")


@dataclass(frozen=True)
class Desired:
    """What the TrainingJob should have: a valid job and its rendered child, or the problems."""

    job: TrainingJob | None
    child: dict[str, Any] | None
    target: str | None
    problems: list[str] = field(default_factory=list)

    @property
    def spec_hash(self) -> str | None:
        return annotation(self.child, SPEC_HASH_ANNOTATION) if self.child else None


def annotation(obj: dict[str, Any] | None, name: str) -> str | None:
    return (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(name)


def spec_data(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a kubetrain.yaml: the server's metadata fields (uid, managedFields...) left out."""
    meta = meta_of(obj)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if not k.startswith(FOREIGN_ANNOTATION_PREFIXES)}
    metadata = {"name": meta.get("name"), "namespace": meta.get("namespace")}
    if meta.get("labels"):
        metadata["labels"] = meta["labels"]
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": metadata,
            "spec": obj.get("spec")}


def desired(obj: dict[str, Any], served: list[str], lookup: CodeLookup | None = None,
            current_dir: str | None = None) -> Desired:
    """Load, check and render the object. `served`: the targets the cluster serves (pytorchjob, trainjob);
    `lookup` reads the code ConfigMap `kubetrain submit --controller` uploaded; `current_dir` is
    status.checkpointDir (see checkpoint_dir_of)."""
    try:
        loaded = LoadedSpec(validate_data(spec_data(obj), {}, ""), "", Path("/"))
    except SpecError as exc:
        return Desired(None, None, None, exc.lines())
    job = loaded.job
    code, problems = resolve_code(job, obj, lookup)
    target = resolve_target(job) if job.spec.target != "auto" else next(iter(served), "pytorchjob")
    if target not in served:
        problems.append(f"spec.target: {target}: the cluster does not serve it (install its operator)")
    if job.spec.gpu_via != "plugin":  # the controller creates one child; DRA needs its claim templates too
        problems.append(f"spec.gpus.via: {job.spec.gpu_via} is not supported by the kubetrain controller yet; "
                        "submit the job directly (kubetrain submit without --controller)")
    if problems:
        return Desired(job, None, target, problems)
    try:
        child = render_loaded(loaded, target=target, namespace=job.metadata.namespace, code=code,
                              checkpoint_dir=checkpoint_dir_of(job, current_dir))[-1]
    except (SpecError, RenderError) as exc:
        return Desired(job, None, target, exc.lines())
    return Desired(job, owned(child, obj), target)


class DesiredCache:
    """`desired` per object content: a reconcile caused by a status or child change (most of them) does not
    load and render the unchanged spec again. Only problem-free results are kept (a problem may be a
    ConfigMap that appears later); bounded, least recently used first out."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self.hits = self.misses = 0
        self._items: OrderedDict[str, Desired] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, obj: dict[str, Any], served: list[str], lookup: CodeLookup | None = None,
            current_dir: str | None = None) -> Desired:
        meta = meta_of(obj)
        content = json.dumps([meta.get("uid"), spec_data(obj), annotation(obj, CODE_ANNOTATION), served,
                              current_dir], sort_keys=True, default=str)
        key = hashlib.sha256(content.encode()).hexdigest()
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return found
            self.misses += 1
        want = desired(obj, served, lookup, current_dir)
        if not want.problems:
            with self._lock:
                self._items[key] = want
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        return want


def code_reference(obj: dict[str, Any]) -> tuple[str, list[dict[str, str]]] | None:
    """(ConfigMap name, items) from the annotation `kubetrain submit --controller` sets; None if absent."""
    try:
        ref = json.loads(annotation(obj, CODE_ANNOTATION) or "null")
        return (str(ref["configMap"]), [{"key": str(i["key"]), "path": str(i["path"])} for i in ref["items"]])
    except (ValueError, TypeError, KeyError):
        return None


def resolve_code(job: TrainingJob, obj: dict[str, Any], lookup: CodeLookup | None
                 ) -> tuple[CodeBundle | None, list[str]]:
    """Fields that point at the user's machine: `code.path` resolves only through an uploaded ConfigMap.
    `build` only says how the image was made and is ignored here."""
    if job.spec.code is None:
        return None, []
    ref = code_reference(obj)
    if ref is None or lookup is None:
        return None, [str(Problem("spec.code.path", f"{job.spec.code.path!r}: {UNRESOLVED_CODE}"))]
    name, items = ref
    configmap = lookup(job.metadata.namespace or "", name)
    if configmap is None:
        return None, [f"spec.code: ConfigMap {name} not found: re-submit with `kubetrain submit --controller`"]
    try:
        bundle = bundle_from(configmap, items)
    except (KeyError, ValueError):
        bundle = None
    if bundle is None or code_configmap_name(job, bundle) != name:
        return None, [f"spec.code: ConfigMap {name} does not hold the files its name promises: re-submit"]
    return bundle, []


def bundle_from(configmap: dict[str, Any], items: list[dict[str, str]]) -> CodeBundle:
    """The CodeBundle a code ConfigMap was rendered from (its digest names the ConfigMap)."""
    data, binary = configmap.get("data") or {}, configmap.get("binaryData") or {}
    files = [(i["path"], data[i["key"]].encode() if i["key"] in data else base64.b64decode(binary[i["key"]]))
             for i in items]
    return CodeBundle(tuple(sorted(files)))


def owned(child: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """The child with a controller ownerReference: deleting the TrainingJob deletes it (garbage collector)."""
    meta = owner["metadata"]
    ref = {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"],
           "controller": True, "blockOwnerDeletion": True}
    return {**child, "metadata": {**child["metadata"], "ownerReferences": [ref]}}


def keep_admission(child: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    """The child to re-apply over `live` (drift): Kueue admits a queued TrainJob by setting the `spec.suspend:
    true` it was created with to false. Re-applying the rendered `true` (forced) suspended the admitted job
    again, its pods went, Kueue unsuspended it, and round it went, never Succeeding. So the live value is kept,
    with the live resourceVersion as a precondition: an admission between our read and the apply is a 409, and
    the retry reads it."""
    spec = child.get("spec") or {}
    if "suspend" not in spec or "suspend" not in (live.get("spec") or {}):
        return child
    metadata = {**child["metadata"], "resourceVersion": meta_of(live).get("resourceVersion")}
    return {**child, "metadata": metadata, "spec": {**spec, "suspend": live["spec"]["suspend"]}}


def owner_name(obj: dict[str, Any]) -> str | None:
    """The TrainingJob that controls `obj`, if any."""
    for ref in meta_of(obj).get("ownerReferences") or []:
        if ref.get("kind") == KIND and ref.get("apiVersion", "").startswith(GROUP + "/") and ref.get("controller"):
            return str(ref.get("name"))
    return None


def owned_by(child: dict[str, Any], owner: dict[str, Any]) -> bool:
    uid = meta_of(owner).get("uid")
    return any(ref.get("uid") == uid for ref in meta_of(child).get("ownerReferences") or [])


def update_policy(obj: dict[str, Any], default: str) -> str:
    chosen = annotation(obj, UPDATE_POLICY_ANNOTATION)
    return chosen if chosen in POLICIES else default


def checkpoint_dir_of(job: TrainingJob | None, current: str | None, policy: str | None = None,
                      spec_hash: str | None = None) -> str | None:
    """The child's checkpoint directory (status.checkpointDir). A child recreated from a changed spec under
    `recreate` starts fresh in a directory of its own under spec.checkpoint.dir (the old run's checkpoints
    stay where they were, never resumed from, never pruned by the new run); under `continue` it keeps the old
    child's directory and resumes from its newest checkpoint. `policy` None: no recreation now."""
    base = job.spec.checkpoint.dir if job else None
    if not base:
        return None
    runs = f"{base.rstrip('/')}/run-"
    if policy == "recreate" and spec_hash:
        return runs + spec_hash
    # A changed spec.checkpoint.dir is where the user wants the child to checkpoint (and resume from).
    return current if current and (current == base or current.startswith(runs)) else base


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
