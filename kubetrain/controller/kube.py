"""The controller's I/O, all on the one REST client (kubetrain.kube.rest): informer lists and watches, status
patches, Events (sent in the background), child deletes, the code ConfigMap, pod log tails, and the request
counter behind its /metrics. Leases are in kubetrain.kube.lease, the child apply in kubetrain.jobs.apply, the
install in controller.install.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter, OrderedDict, defaultdict
from typing import Any

from kubetrain.controller.crd import GROUP, KIND, PLURAL, VERSION
from kubetrain.controller.reconcile import now
from kubetrain.kube import watch
from kubetrain.kube.errors import ApiError, NotFound
from kubetrain.kube.rest import Rest, path_of

log = logging.getLogger("kubetrain.controller")
COMPONENT = "kubetrain-controller"
MAX_PENDING = 4096  # Events waiting to be sent; beyond that they are dropped (and counted), never queued forever
SENDERS = 4  # parallel POSTs: each waits a round trip, and a burst of creates records one Event per job
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


def custom_list_fn(rest: Rest, group: str, version: str, plural: str,
                   namespace: str | None) -> watch.ListFn:
    """The list (and watch) call of a custom resource, in one namespace or in all, on the one REST client,
    without retries of its own: the informer's watch.stream backs off (kubetrain.controller.informer)."""
    return watch.rest_list(rest, path_of(group, version, plural, namespace), retry=False)


def patch_status(rest: Rest, namespace: str, name: str, status: dict[str, Any]) -> str | None:
    """A merge patch of the status subresource: lists (conditions) are replaced whole, as intended. Returns
    the object's new resourceVersion."""
    patched = rest.json("PATCH", path_of(GROUP, VERSION, PLURAL, namespace, name) + "/status",
                       body={"status": status}, content_type="application/merge-patch+json")
    return (patched.get("metadata") or {}).get("resourceVersion")


def delete_child(rest: Rest, child: dict[str, Any], plural: str) -> None:
    """Foreground: the child stays (deletionTimestamp set) until its pods are gone, so a recreated child
    never meets pods of the old one with the same names. Already gone is fine."""
    group, version = child["apiVersion"].split("/")
    meta = child["metadata"]
    with contextlib.suppress(NotFound):
        rest.request("DELETE", path_of(group, version, plural, meta["namespace"], meta["name"]),
                    body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"})


def delete_pod(rest: Rest, namespace: str, name: str, grace_seconds: int) -> None:
    """Delete a pod (its controller creates it again); already gone is fine."""
    with contextlib.suppress(NotFound):
        rest.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                    body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace_seconds})


def read_configmap(rest: Rest, namespace: str, name: str) -> dict[str, Any] | None:
    """The ConfigMap as a dict, None if it does not exist."""
    try:
        return rest.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    except NotFound:
        return None


def pod_log_tail(rest: Rest, namespace: str, pod: str, container: str | None, tail: int,
                 limit_bytes: int) -> list[str]:
    """The last `tail` lines (at most `limit_bytes`) of a pod's log: never the whole log, never a stream; a
    kubelet that does not answer within the client's kubelet_timeout is a Timeout."""
    query = {"container": container, "tailLines": tail, "limitBytes": limit_bytes}
    response = rest.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", query,
                           read_timeout=rest.kubelet_timeout)
    return response.data.decode("utf-8", "replace").splitlines()


def create_event(rest: Rest, namespace: str, body: dict[str, Any]) -> str | None:
    """POST a core/v1 Event; None when done, else the API's reason (an Event is never worth a failure)."""
    try:
        rest.request("POST", f"/api/v1/namespaces/{namespace}/events", body=body)
    except ApiError as exc:
        return str(exc.reason)
    return None


def event_body(obj: dict[str, Any], kind: str, reason: str, message: str, count: int = 1) -> dict[str, Any]:
    """A core/v1 Event on the TrainingJob (what `kubectl describe` and `kubetrain events` show)."""
    meta = obj["metadata"]
    stamp = now()
    return {"metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": message[:1024], "type": kind, "count": count,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT}


class EventRecorder:
    """Events sent by background threads, as client-go's EventBroadcaster does: a reconcile never waits on
    an Event's round trip. The same Event (object, type, reason, message) recorded again while it still
    waits is sent once with its count raised (aggregation); at most MAX_PENDING wait."""

    def __init__(self, rest: Rest, senders: int = SENDERS) -> None:
        self.rest = rest
        self.sent = self.dropped = 0
        self._pending: OrderedDict[tuple[str, ...], tuple[dict[str, Any], int]] = OrderedDict()
        self._cond = threading.Condition()
        self._closed = False
        self._busy = 0
        self._threads = [threading.Thread(target=self._send_loop, name=f"events-{i}", daemon=True)
                         for i in range(senders)]
        for thread in self._threads:
            thread.start()

    def record(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        key = (str(obj["metadata"].get("uid")), kind, reason, message)
        with self._cond:
            if key in self._pending:
                body, count = self._pending[key]
                self._pending[key] = (body, count + 1)
                return
            if len(self._pending) >= MAX_PENDING:
                self.dropped += 1
                log.warning("event %s on %s/%s dropped: %d Events waiting", reason,
                            obj["metadata"]["namespace"], obj["metadata"]["name"], MAX_PENDING)
                return
            self._pending[key] = (event_body(obj, kind, reason, message), 1)
            self._cond.notify()

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                _, (body, count) = self._pending.popitem(last=False)
                self._busy += 1
            try:
                self._send({**body, "count": count})
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def _send(self, body: dict[str, Any]) -> None:
        try:
            failure = create_event(self.rest, body["metadata"]["namespace"], body)
        except Exception as exc:  # unreachable API server: an Event is worth a log line, never a crash
            failure = f"{type(exc).__name__}: {exc}"
        if failure:
            log.warning("event %s on %s/%s not recorded: %s", body["reason"], body["metadata"]["namespace"],
                        body["involvedObject"]["name"], failure)
        else:
            self.sent += 1

    def pending(self) -> int:
        with self._cond:
            return len(self._pending) + self._busy

    def flush(self, timeout: float) -> bool:
        """Wait until every recorded Event was sent (True) or `timeout` seconds passed (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Send what waits (for at most `timeout` seconds), then stop the senders."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()
