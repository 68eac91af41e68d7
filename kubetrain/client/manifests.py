"""Apply or delete a list of arbitrary manifests (any kind) with the kubernetes client's DynamicClient:
discovery maps each apiVersion/kind to its resource. Used by `kubetrain controller install|uninstall`."""

from __future__ import annotations

from typing import Any

from kubetrain.client.errors import cluster_errors


def apply_all(api: Any, objects: list[dict[str, Any]], field_manager: str, dry_run: bool = False) -> list[str]:
    """Server-side apply each object (forcing conflicts: the install owns these fields); `kind/name` lines."""
    from kubernetes.dynamic import DynamicClient

    dynamic: Any = DynamicClient(api)  # type: ignore[no-untyped-call,unused-ignore]
    done = []
    for obj in objects:
        meta = obj["metadata"]
        with cluster_errors(f"apply {obj['kind']} {meta['name']}"):
            resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            dynamic.server_side_apply(resource, body=obj, name=meta["name"], namespace=meta.get("namespace"),
                                      field_manager=field_manager, force_conflicts=True,
                                      dry_run="All" if dry_run else None)
        done.append(f"{obj['kind'].lower()}/{meta['name']}")
    return done


def delete_all(api: Any, objects: list[dict[str, Any]], dry_run: bool = False) -> list[str]:
    """Delete in reverse order; missing objects are fine (deleting twice is a no-op); `kind/name` lines."""
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import NotFoundError

    dynamic: Any = DynamicClient(api)  # type: ignore[no-untyped-call,unused-ignore]
    done = []
    for obj in reversed(objects):
        meta = obj["metadata"]
        with cluster_errors(f"delete {obj['kind']} {meta['name']}"):
            resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            try:
                dynamic.delete(resource, name=meta["name"], namespace=meta.get("namespace"),
                               dry_run="All" if dry_run else None)
            except NotFoundError:
                continue
        done.append(f"{obj['kind'].lower()}/{meta['name']}")
    return done
