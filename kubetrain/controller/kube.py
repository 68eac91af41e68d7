"""The controller's writes besides the child apply: status, Events (sent in the background), deletes.

The calls themselves are kubetrain.controller.apicalls's; this module knows the TrainingJob's API.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from kubetrain.controller import apicalls as controller_api
from kubetrain.controller.crd import GROUP, KIND, PLURAL, VERSION
from kubetrain.controller.reconcile import now
from kubetrain.kube.rest import Rest

log = logging.getLogger("kubetrain.controller")
COMPONENT = "kubetrain-controller"
MAX_PENDING = 4096  # Events waiting to be sent; beyond that they are dropped (and counted), never queued forever
SENDERS = 4  # parallel POSTs: each waits a round trip, and a burst of creates records one Event per job


def patch_status(api: Rest, namespace: str, name: str, status: dict[str, Any]) -> None:
    controller_api.patch_status(api, GROUP, VERSION, PLURAL, namespace, name, status)


def delete_child(api: Rest, child: dict[str, Any], plural: str) -> None:
    """Foreground: the child stays (deletionTimestamp set) until its pods are gone, so a recreated child
    never meets pods of the old one with the same names."""
    group, version = child["apiVersion"].split("/")
    meta = child["metadata"]
    controller_api.delete_custom(api, group, version, plural, meta["namespace"], meta["name"], "Foreground")


def read_configmap(api: Rest, namespace: str, name: str) -> dict[str, Any] | None:
    return controller_api.read_configmap(api, namespace, name)


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

    def __init__(self, api: Rest, senders: int = SENDERS) -> None:
        self.api = api
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
            failure = controller_api.create_event(self.api, body["metadata"]["namespace"], body)
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
