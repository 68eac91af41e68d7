"""The controller's writes besides the child apply: status, Events, deletes. Thin wrappers, counted."""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubetrain.controller.crd import GROUP, KIND, PLURAL, VERSION
from kubetrain.controller.reconcile import now

log = logging.getLogger("kubetrain.controller")
COMPONENT = "kubetrain-controller"
HTTP_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}


class RequestCounter:
    """Counts every API request an ApiClient makes, by HTTP method (for /metrics and the benchmark)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        original = api.call_api

        def counted(*args: Any, **kwargs: Any) -> Any:
            # The client's call_api(method, url, ...) (openapi-generator 7): the URL holds the query string.
            method, url = (str(a) for a in [*args, "", ""][:2])
            verb = "WATCH" if "watch=true" in url else method if method in HTTP_METHODS else "OTHER"
            with self._lock:
                self.counts[verb] += 1
            return original(*args, **kwargs)

        api.call_api = counted  # type: ignore[method-assign]

    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())


def patch_status(api: client.ApiClient, namespace: str, name: str, status: dict[str, Any]) -> None:
    """A merge patch of the status subresource: lists (conditions) are replaced whole, as intended."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": status})


def record_event(api: client.ApiClient, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
    """A core/v1 Event on the TrainingJob (what `kubectl describe` and `kubetrain events` show)."""
    meta = obj["metadata"]
    stamp = now()
    body = {"metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": message[:1024], "type": kind, "count": 1,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT}
    try:
        client.CoreV1Api(api).create_namespaced_event(meta["namespace"], body)  # type: ignore[arg-type]
    except ApiException as exc:  # an Event is worth a log line, never a failed reconcile
        log.warning("event %s on %s/%s not recorded: %s", reason, meta["namespace"], meta["name"], exc.reason)


def delete_child(api: client.ApiClient, child: dict[str, Any], plural: str) -> None:
    """Foreground: the child stays (deletionTimestamp set) until its pods are gone, so a recreated child
    never meets pods of the old one with the same names."""
    group, version = child["apiVersion"].split("/")
    meta = child["metadata"]
    try:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            group, version, meta["namespace"], plural, meta["name"], propagation_policy="Foreground")
    except ApiException as exc:
        if exc.status != 404:
            raise


def read_configmap(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        response = client.CoreV1Api(api).read_namespaced_config_map(name, namespace, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    found: dict[str, Any] = json.loads(response.data)  # type: ignore[attr-defined,arg-type,unused-ignore]
    return found
