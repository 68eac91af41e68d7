"""Apply or delete a list of arbitrary manifests (any kind) on the REST client: discovery (/api/v1,
/apis/GROUP/VERSION) maps each apiVersion/kind to its resource and scope, as kubectl's RESTMapper does.
Used by `kubetrain controller install|uninstall`."""

from __future__ import annotations

from typing import Any

from kubetrain.errors import ClusterError
from kubetrain.kube.errors import NotFound, cluster_errors
from kubetrain.kube.rest import Rest, path_of


class _Mapper:
    """apiVersion + kind → (plural, namespaced), one discovery request per apiVersion."""

    def __init__(self, rest: Rest) -> None:
        self.rest = rest
        self._served: dict[str, dict[str, tuple[str, bool]]] = {}

    def path(self, obj: dict[str, Any]) -> str:
        api_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
        if api_version not in self._served:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            resources = self.rest.get(base).get("resources") or []
            self._served[api_version] = {str(r["kind"]): (str(r["name"]), bool(r.get("namespaced")))
                                         for r in resources if "/" not in str(r.get("name", ""))}
        found = self._served[api_version].get(kind)
        if found is None:
            raise ClusterError(f"the cluster does not serve {kind} ({api_version})")
        plural, namespaced = found
        group, _, version = api_version.rpartition("/")
        return path_of(group, version, plural, meta.get("namespace") if namespaced else None, meta["name"])


def apply_all(rest: Rest, objects: list[dict[str, Any]], field_manager: str, dry_run: bool = False) -> list[str]:
    """Server-side apply each object (forcing conflicts: the install owns these fields); `kind/name` lines."""
    mapper = _Mapper(rest)
    done = []
    for obj in objects:
        meta = obj["metadata"]
        with cluster_errors(f"apply {obj['kind']} {meta['name']}"):
            query = {"fieldManager": field_manager, "force": True, "dryRun": "All" if dry_run else None}
            rest.json("PATCH", mapper.path(obj), query, obj, content_type="application/apply-patch+yaml")
        done.append(f"{obj['kind'].lower()}/{meta['name']}")
    return done


def delete_all(rest: Rest, objects: list[dict[str, Any]], dry_run: bool = False) -> list[str]:
    """Delete in reverse order; missing objects are fine (deleting twice is a no-op); `kind/name` lines."""
    mapper = _Mapper(rest)
    done = []
    for obj in reversed(objects):
        meta = obj["metadata"]
        with cluster_errors(f"delete {obj['kind']} {meta['name']}"):
            try:
                rest.request("DELETE", mapper.path(obj), {"dryRun": "All" if dry_run else None})
            except NotFound:
                continue
        done.append(f"{obj['kind'].lower()}/{meta['name']}")
    return done
