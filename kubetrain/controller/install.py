"""`kubetrain controller install|uninstall`: the kustomize base under manifests/controller, applied as is.

The base is plain YAML (namespace, ServiceAccount, RBAC, Deployment, and ../crd), so `kubectl apply -k
manifests/controller` and `kubetrain controller install` apply the very same objects. Reading it needs no
kustomize: `resources` entries are files or directories with their own kustomization.yaml; JSON6902
`patches` (the namespaced variant) are applied with jsonpatch-like `add` only.
Applying is kubetrain.kube.manifests' (server-side apply on the REST client; discovery maps kind → resource).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kubetrain.errors import UsageError
from kubetrain.kube.manifests import apply_all as apply_objects
from kubetrain.kube.manifests import delete_all as delete_objects
from kubetrain.render import manifests_dir

if TYPE_CHECKING:
    from kubetrain.kube.rest import Rest

FIELD_MANAGER = "kubetrain-controller-install"
IMAGE = "ghcr.io/kubetrain/controller:0.1.0"


def base_dir(variant: str = "cluster") -> Path:
    root = manifests_dir() / "controller"
    return root / "namespaced" if variant == "namespaced" else root


def load_base(directory: Path) -> list[dict[str, Any]]:
    """The objects of a kustomization directory, in its `resources` order."""
    kustomization = directory / "kustomization.yaml"
    try:
        spec = yaml.safe_load(kustomization.read_text()) or {}
    except OSError as exc:
        raise UsageError(f"{kustomization}: cannot read: {exc.strerror}") from None
    objects: list[dict[str, Any]] = []
    for entry in spec.get("resources") or []:
        path = (directory / entry).resolve()
        if path.is_dir():
            objects += load_base(path)
        else:
            objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for patch in spec.get("patches") or []:
        _patch(objects, patch)
    return objects


def _patch(objects: list[dict[str, Any]], patch: dict[str, Any]) -> None:
    wanted = patch.get("target") or {}
    for obj in objects:
        if obj.get("kind") == wanted.get("kind") and obj["metadata"]["name"] == wanted.get("name"):
            for op in yaml.safe_load(patch["patch"]):
                if op.get("op") != "add" or not str(op.get("path", "")).endswith("/-"):
                    raise UsageError(f"kustomization patch {op}: only list appends (add .../-) are supported")
                _walk(obj, op["path"][1:-2].split("/")).append(op["value"])


def _walk(obj: Any, parts: list[str]) -> Any:
    for part in parts:
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def objects_for(variant: str = "cluster", image: str | None = None, namespace: str | None = None
                ) -> list[dict[str, Any]]:
    """The install's objects, with the controller image and (namespaced variant) the watched namespace."""
    objects = load_base(base_dir(variant))
    for obj in objects:
        if obj.get("kind") == "Deployment" and image:
            obj["spec"]["template"]["spec"]["containers"][0]["image"] = image
        if namespace and variant == "namespaced":
            _set_watched_namespace(obj, namespace)
    return objects


def _set_watched_namespace(obj: dict[str, Any], namespace: str) -> None:
    if obj.get("kind") == "Deployment":
        container = obj["spec"]["template"]["spec"]["containers"][0]
        container["args"] = [a if not a.startswith("--watch-namespace=") else f"--watch-namespace={namespace}"
                             for a in container["args"]]
    elif obj.get("kind") in ("Role", "RoleBinding") and obj["metadata"].get("namespace") == "ml":
        obj["metadata"]["namespace"] = namespace


def apply_all(rest: Rest, objects: list[dict[str, Any]], dry_run: bool = False) -> list[str]:
    """Server-side apply each object; returns `kind/name` lines."""
    return apply_objects(rest, objects, FIELD_MANAGER, dry_run)


def delete_all(rest: Rest, objects: list[dict[str, Any]], dry_run: bool = False) -> list[str]:
    """Delete in reverse order; missing objects are fine (uninstall twice is a no-op)."""
    return delete_objects(rest, objects, dry_run)
