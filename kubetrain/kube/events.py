"""Events of given objects only, by field selector: never a namespace-wide read.

`involvedObject.uid=U` ties an Event to one incarnation of an object, so a job re-created under the same
name (or `submit --replace`) does not inherit its predecessor's "Scheduled" and "Succeeded". The API has
no OR/IN for field selectors (only =, == and != per field), so there is one server-filtered list per
object, and they run in parallel: the apiserver filters by scanning the namespace's events, which with
25,000 of them costs it ~60-250 ms per list, so sequential lists added up (1 s for a 2-pod job's status).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubetrain.kube import watch
from kubetrain.kube.errors import cluster_errors
from kubetrain.kube.objects import meta_of
from kubetrain.kube.parallel import map_parallel
from kubetrain.kube.rest import Rest, path_of

PARALLEL = 8


def list_events(rest: Rest, namespace: str, uids: Iterable[str] = (), named: Iterable[tuple[str, str]] = (),
                listed: Mapping[str, list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """Events of the objects with these UIDs, and of these (kind, name)s (for objects already deleted,
    whose UIDs we no longer know; callers filter those by time). `listed`: selectors already listed (by
    `list_selected`), not asked for again."""
    done = dict(listed or {})
    wanted = selectors(uids, named)
    done.update(list_selected(rest, namespace, [s for s in wanted if s not in done]))
    seen: dict[str, dict[str, Any]] = {}
    for event in (e for selector in wanted for e in done[selector]):
        seen.setdefault(str(meta_of(event).get("uid") or id(event)), event)
    return list(seen.values())


def selectors(uids: Iterable[str] = (), named: Iterable[tuple[str, str]] = ()) -> list[str]:
    """One field selector per object: by UID, or by kind and name."""
    found = [uid_selector(uid) for uid in dict.fromkeys(uids) if uid]
    return found + [f"involvedObject.kind={kind},involvedObject.name={name}" for kind, name in dict.fromkeys(named)]


def uid_selector(uid: str) -> str:
    return f"involvedObject.uid={uid}"


def list_selected(rest: Rest, namespace: str, wanted: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each field selector's Events, the lists run in parallel."""
    if not wanted:
        return {}
    list_fn = watch.rest_list(rest, path_of("", "v1", "events", namespace))

    def one(selector: str) -> list[dict[str, Any]]:
        return watch.list_objects(list_fn, field_selector=selector)[0]

    with cluster_errors(f"list events in namespace {namespace}"):
        if len(wanted) == 1:
            return {wanted[0]: one(wanted[0])}
        return dict(zip(wanted, map_parallel(one, wanted, PARALLEL), strict=True))
