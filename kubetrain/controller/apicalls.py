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
from kubetrain.kube.rest import path_of, rest_of

# What the controller's calls take: its Connection's Rest (what `kubetrain controller run` passes), or anything
# rest_of() takes (a Connection, a kubernetes ApiClient in tests).
ApiClient = Any
# What a failed list/watch raises (the informer backs off and re-lists on any).
WATCH_ERRORS: tuple[type[BaseException], ...] = (ApiError, OSError, ValueError)
HTTP_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}


class RequestCounter:
    """Counts every API request made through an ApiClient — its typed calls and the kubetrain REST client
    over it (pod lists, discovery, Kueue reads) — and the seconds spent waiting for the response headers,
    by HTTP method (for /metrics and the benchmark: where a reconcile's time goes)."""

    def __init__(self, api: ApiClient) -> None:
        self.counts: Counter[str] = Counter()
        self.seconds: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()
        typed, rest = getattr(api, "call_api", None), rest_of(api)
        plain = rest.request

        def counted(*args: Any, **kwargs: Any) -> Any:
            # The client's call_api(method, url, ...) (openapi-generator 7): the URL holds the query string.
            method, url = (str(a) for a in [*args, "", ""][:2])
            return self._timed("WATCH" if "watch=true" in url else method, typed, args, kwargs)

        def counted_rest(method: str, path: str, query: Any = None, *args: Any, **kwargs: Any) -> Any:
            verb = "WATCH" if query and query.get("watch") else method
            return self._timed(verb, plain, (method, path, query, *args), kwargs)

        if typed is not None:  # a kubernetes ApiClient (tests): its typed calls count too
            api.call_api = counted
        rest.request = counted_rest  # type: ignore[method-assign]

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


def widen_pool(api: ApiClient, size: int) -> None:
    """Let `size` requests run at once: urllib3 keeps cpu_count · 5 connections per host by default, and
    further concurrent requests each open (and then drop) a fresh TLS connection."""
    if not hasattr(api, "configuration"):  # the REST client's pool never blocks: nothing to widen
        return
    if (api.configuration.connection_pool_maxsize or 0) < size:
        api.configuration.connection_pool_maxsize = size
        api.rest_client = type(api.rest_client)(api.configuration)


def custom_list_fn(api: ApiClient, group: str, version: str, plural: str,
                   namespace: str | None) -> watch.ListFn:
    """The list (and watch) call of a custom resource, in one namespace or in all, on the one REST client: its
    retries are the only ones under the informer's backoff (kubetrain.controller.informer)."""
    return watch.rest_list(api, path_of(group, version, plural, namespace))


def patch_status(api: ApiClient, group: str, version: str, plural: str, namespace: str, name: str,
                 status: dict[str, Any]) -> None:
    """A merge patch of the status subresource: lists (conditions) are replaced whole, as intended."""
    rest_of(api).request("PATCH", path_of(group, version, plural, namespace, name) + "/status",
                         body={"status": status}, content_type="application/merge-patch+json")


def create_event(api: ApiClient, namespace: str, body: dict[str, Any]) -> str | None:
    """POST a core/v1 Event; None when done, else the API's reason (an Event is never worth a failure)."""
    try:
        rest_of(api).request("POST", f"/api/v1/namespaces/{namespace}/events", body=body)
    except ApiError as exc:
        return str(exc.reason)
    return None


def delete_custom(api: ApiClient, group: str, version: str, plural: str, namespace: str, name: str,
                  propagation: str = "Foreground") -> None:
    """Delete a custom object; already gone is fine."""
    with contextlib.suppress(NotFound):
        rest_of(api).request("DELETE", path_of(group, version, plural, namespace, name),
                             body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation})


def delete_pod(api: ApiClient, namespace: str, name: str, grace_seconds: int) -> None:
    """Delete a pod (its controller creates it again); already gone is fine."""
    with contextlib.suppress(NotFound):
        rest_of(api).request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                             body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace_seconds})


def read_configmap(api: ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The ConfigMap as a dict, None if it does not exist."""
    try:
        return rest_of(api).get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    except NotFound:
        return None


def pod_log_tail(api: ApiClient, namespace: str, pod: str, container: str | None, tail: int,
                 limit_bytes: int) -> list[str]:
    """The last `tail` lines (at most `limit_bytes`) of a pod's log: never the whole log, never a stream."""
    query = {"container": container, "tailLines": tail, "limitBytes": limit_bytes}
    response = rest_of(api).request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", query)
    return response.data.decode("utf-8", "replace").splitlines()
