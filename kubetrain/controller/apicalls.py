"""The API calls of the in-cluster controller (kubetrain.controller), all on the one REST client: informer lists
and watches, status patches, Events, child deletes, the code ConfigMap, pod log tails, and the request counter
behind its /metrics. Leases are in kubetrain.kube.lease, the install in controller.install.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter, defaultdict
from typing import Any

from kubetrain.kube import watch
from kubetrain.kube.errors import ApiError, NotFound
from kubetrain.kube.rest import Rest, path_of

# What a failed list/watch raises (the informer backs off and re-lists on any).
WATCH_ERRORS: tuple[type[BaseException], ...] = (ApiError, OSError, ValueError)
HTTP_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}


class RequestCounter:
    """Counts every API request the controller's client makes (informer lists and watches, patches, Events,
    pod lists, discovery, Kueue reads) and the seconds spent waiting for the response headers, by HTTP
    method (for /metrics and the benchmark: where a reconcile's time goes)."""

    def __init__(self, rest: Rest) -> None:
        self.counts: Counter[str] = Counter()
        self.seconds: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()
        plain = rest.request

        def counted(method: str, path: str, query: Any = None, *args: Any, **kwargs: Any) -> Any:
            verb = "WATCH" if query and query.get("watch") else method
            return self._timed(verb, plain, (method, path, query, *args), kwargs)

        rest.request = counted  # type: ignore[method-assign]

    def _timed(self, verb: str, call: Any, args: Any, kwargs: Any) -> Any:
        verb = verb if verb in HTTP_METHODS or verb == "WATCH" else "OTHER"
        began = time.monotonic()
        try:
            return call(*args, **kwargs)
        finally:
            with self._lock:
                self.counts[verb] += 1
                self.seconds[verb] += time.monotonic() - began

    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())


def custom_list_fn(api: Rest, group: str, version: str, plural: str,
                   namespace: str | None) -> watch.ListFn:
    """The list (and watch) call of a custom resource, in one namespace or in all, on the one REST client: its
    retries are the only ones under the informer's backoff (kubetrain.controller.informer)."""
    return watch.rest_list(api, path_of(group, version, plural, namespace))


def patch_status(api: Rest, group: str, version: str, plural: str, namespace: str, name: str,
                 status: dict[str, Any]) -> None:
    """A merge patch of the status subresource: lists (conditions) are replaced whole, as intended."""
    api.request("PATCH", path_of(group, version, plural, namespace, name) + "/status",
                body={"status": status}, content_type="application/merge-patch+json")


def create_event(api: Rest, namespace: str, body: dict[str, Any]) -> str | None:
    """POST a core/v1 Event; None when done, else the API's reason (an Event is never worth a failure)."""
    try:
        api.request("POST", f"/api/v1/namespaces/{namespace}/events", body=body)
    except ApiError as exc:
        return str(exc.reason)
    return None


def delete_custom(api: Rest, group: str, version: str, plural: str, namespace: str, name: str,
                  propagation: str = "Foreground") -> None:
    """Delete a custom object; already gone is fine."""
    with contextlib.suppress(NotFound):
        api.request("DELETE", path_of(group, version, plural, namespace, name),
                    body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation})


def read_configmap(api: Rest, namespace: str, name: str) -> dict[str, Any] | None:
    """The ConfigMap as a dict, None if it does not exist."""
    try:
        return api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    except NotFound:
        return None


def pod_log_tail(api: Rest, namespace: str, pod: str, container: str | None, tail: int,
                 limit_bytes: int) -> list[str]:
    """The last `tail` lines (at most `limit_bytes`) of a pod's log: never the whole log, never a stream."""
    query = {"container": container, "tailLines": tail, "limitBytes": limit_bytes}
    response = api.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", query)
    return response.data.decode("utf-8", "replace").splitlines()
