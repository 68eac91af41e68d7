"""While a followed job waits (no pods yet, or pods Pending): say so, and pass on the scheduling events."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kubetrain.jobs import hints
from kubetrain.jobs.pods import Replica
from kubetrain.kube.events import list_events
from kubetrain.kube.objects import meta_of

if TYPE_CHECKING:
    from kubetrain.kube.rest import Rest

EVENTS_EVERY = 2.0  # seconds between event lists while something is pending


class PendingReporter:
    """Tells `notice` about pending replicas: their state when it changes, and each new event about them."""

    def __init__(self, rest: Rest, namespace: str, kind: str, job: str,
                 notice: Callable[[str], None], every: float = EVENTS_EVERY) -> None:
        self.rest, self.namespace, self.kind, self.job, self.notice = rest, namespace, kind, job, notice
        self.every = every
        self._states: dict[str, str] = {}
        self._seen: set[tuple[str, str]] = set()
        self._next = 0.0
        self._job_state = ""

    def report(self, pending: list[Replica], have_pods: bool, job_state: str, now: float, job_uid: str = "") -> None:
        if not have_pods and job_state != self._job_state:
            self.notice(f"waiting for the pods of {self.kind} {self.job} (job: {job_state})")
        self._job_state = job_state
        for replica in pending:
            state = replica.reason or replica.phase
            if self._states.get(replica.pod) != state:
                self._states[replica.pod] = state
                self.notice(f"[{replica.label}] {replica.phase}: {state}")
        if (pending or not have_pods) and now >= self._next:
            self._next = now + self.every
            self._events({r.uid: r.label for r in pending}, job_uid)

    def _events(self, labels: dict[str, str], job_uid: str) -> None:
        """Only this job's and its pending pods' Events (by UID: not a namespace-wide read, and not the
        events of an earlier job of the same name)."""
        try:
            items = list_events(self.rest, self.namespace, [job_uid, *labels])
        except Exception as exc:  # events are a courtesy while waiting: never stop following over them
            key = ("error", type(exc).__name__)
            if key not in self._seen:
                self._seen.add(key)
                self.notice(f"cannot list events in namespace {self.namespace}: {exc}")
            return
        for event in sorted(items, key=_time):
            self._one(event, labels)

    def _one(self, event: dict[str, Any], labels: dict[str, str]) -> None:
        involved = event.get("involvedObject") or {}
        uid = str(involved.get("uid") or "")
        if uid in labels and involved.get("kind") == "Pod":
            where = f"[{labels[uid]}]"
        elif involved.get("name") == self.job and event.get("type") == "Warning":
            where = f"{self.kind} {self.job}:"
        else:
            return
        count = (event.get("series") or {}).get("count") or event.get("count") or 1
        key = (str(meta_of(event).get("uid", "")), f"{count}/{event.get('message')}")
        if key in self._seen:
            return
        self._seen.add(key)
        message = " ".join(str(event.get("message") or "").split())
        line = f"{where} {event.get('reason', '')}: {message}"
        for hint in hints.event_hints(event):
            line += f"\n  hint: {hint}"
        self.notice(line)


def _time(event: dict[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or
               meta_of(event).get("creationTimestamp") or "")
