"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Only the leader reconciles; the others wait. A Lease is taken over when its holder has not renewed it for
`duration` seconds, measured on *our* clock from when we last saw the record change (client-go's rule,
immune to clock skew between replicas). The leader renews every `retry` seconds; if it cannot renew for
`renew_deadline` seconds it stops leading (the process exits and its Deployment restarts it), so two
leaders can overlap by at most duration - renew_deadline. A clean shutdown releases the Lease at once.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubetrain.kube.lease import LeaseConflict, LeaseError, Leases
from kubetrain.kube.rest import Rest

log = logging.getLogger("kubetrain.controller")


def micro_time(when: dt.datetime | None = None) -> str:
    return (when or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(self, rest: Rest, namespace: str, name: str, identity: str, duration: float = 15,
                 renew_deadline: float = 10, retry: float = 2) -> None:
        self.rest, self.namespace, self.name, self.identity = rest, namespace, name, identity
        self.duration, self.renew_deadline, self.retry = duration, renew_deadline, retry
        self._leases = Leases(rest, namespace, name)
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0

    def acquire(self, stop: threading.Event) -> bool:
        """Block until we lead (True) or `stop` (False)."""
        announced = False
        while not stop.is_set():
            if self.try_acquire_or_renew():
                log.info("leader election: %s leads (Lease %s/%s)", self.identity, self.namespace, self.name)
                return True
            if not announced:
                log.info("leader election: waiting for Lease %s/%s", self.namespace, self.name)
                announced = True
            stop.wait(self.retry)
        return False

    def hold(self, stop: threading.Event, on_lost: Callable[[], None]) -> None:
        """Renew until `stop`, or call `on_lost` when renewing fails for renew_deadline (the caller releases)."""
        last = time.monotonic()
        while not stop.wait(self.retry):
            if self.try_acquire_or_renew():
                last = time.monotonic()
            elif time.monotonic() - last > self.renew_deadline:
                log.error("leader election: lost Lease %s/%s", self.namespace, self.name)
                on_lost()
                return

    def try_acquire_or_renew(self) -> bool:
        try:
            lease = self._leases.read()
            if lease is None:
                self._leases.create(self._record(None))
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            if holder and holder != self.identity and not self._expired(spec):
                return False
            self._leases.replace({**self._record(lease), "metadata": lease["metadata"]})
            return True
        except LeaseConflict:  # someone else wrote first
            return False
        except LeaseError as exc:
            log.warning("leader election: %s", exc)
            return False
        except Exception as exc:  # unreachable API server: not leading this round
            log.warning("leader election: %s", exc)
            return False

    def release(self) -> None:
        try:
            lease = self._leases.read()
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                spec = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}
                self._leases.replace({**lease, "spec": spec})
        except Exception as exc:  # best effort; the Lease expires anyway
            log.warning("leader election: could not release the Lease: %s", exc)

    def _expired(self, spec: dict[str, Any]) -> bool:
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        duration = float(spec.get("leaseDurationSeconds") or self.duration)
        return time.monotonic() > self._observed_at + duration

    def _record(self, lease: dict[str, Any] | None) -> dict[str, Any]:
        spec = (lease or {}).get("spec") or {}
        stamp = micro_time()
        mine = spec.get("holderIdentity") == self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine or lease is None else 1)
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration),
                         "acquireTime": spec.get("acquireTime") if mine else stamp, "renewTime": stamp,
                         "leaseTransitions": transitions}}
