"""A job's status: its conditions, every replica's pod, recent Events, and what they mean (hints)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from kubernetes import client

from kubetrain.client import hints, jobs, pods, watch
from kubetrain.client.errors import cluster_errors
from kubetrain.client.targets import PYTORCHJOB, Target

JOB_KINDS = {"PyTorchJob", "TrainJob", "JobSet", "Job", "Service"}


@dataclass(frozen=True)
class PodRow:
    replica: str
    name: str
    phase: str
    node: str
    restarts: int
    last_termination: str
    hints: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class EventRow:
    time: str
    type: str
    reason: str
    object: str  # kind/name
    message: str
    count: int
    hints: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class JobStatus:
    job: jobs.JobSummary
    conditions: list[dict[str, Any]]
    pods: list[PodRow]
    events: list[EventRow]
    hints: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {**self.job.as_dict(), "conditions": self.conditions, "pods": [asdict(p) for p in self.pods],
                "events": [asdict(e) for e in self.events], "hints": self.hints}


def pod_rows(pod_list: list[dict[str, Any]], target: Target, job: str) -> list[PodRow]:
    rows = []
    for replica in pods.replicas_of(pod_list, target, job):
        rows.append(PodRow(replica.label, replica.pod, replica.phase + (" (deleting)" if replica.deleting else ""),
                           replica.node or "", replica.restarts, hints.last_termination(replica.obj),
                           hints.pod_hints(replica.obj)))
    return rows


def _event_time(event: dict[str, Any]) -> str:
    """When it last happened: core/v1 lastTimestamp, or an events.k8s.io series/eventTime (the scheduler's)."""
    return str(event.get("lastTimestamp") or (event.get("series") or {}).get("lastObservedTime") or
               event.get("eventTime") or (event.get("metadata") or {}).get("creationTimestamp") or "")


def _sort_key(event: dict[str, Any]) -> tuple[dt.datetime, str]:
    try:
        when = dt.datetime.fromisoformat(_event_time(event).replace("Z", "+00:00"))
    except ValueError:
        when = dt.datetime.min.replace(tzinfo=dt.UTC)
    return when, str((event.get("metadata") or {}).get("resourceVersion", ""))


def belongs(event: dict[str, Any], target: Target, job: str, pod_names: set[str]) -> bool:
    """Is the Event about this job, one of its pods (current or deleted), or its JobSet/Jobs/Services?"""
    involved = event.get("involvedObject") or {}
    name, kind = str(involved.get("name") or ""), str(involved.get("kind") or "")
    if name in pod_names or (name == job and kind in JOB_KINDS | {target.kind}):
        return True
    if target is PYTORCHJOB:
        return bool(re.fullmatch(rf"{re.escape(job)}-(master|worker)-\d+", name)) and kind in {"Pod", "Service"}
    return bool(re.fullmatch(rf"{re.escape(job)}-[a-z0-9-]+", name)) and kind in {"Pod", "Job"}


def job_events(api: client.ApiClient, target: Target, namespace: str, job: str, pod_names: set[str]
               ) -> list[EventRow]:
    """The job's Events, oldest first."""
    with cluster_errors(f"list events in namespace {namespace}"):
        items, _ = watch.list_objects(client.CoreV1Api(api).list_namespaced_event, namespace=namespace)
    mine = sorted((e for e in items if belongs(e, target, job, pod_names)), key=_sort_key)
    rows = []
    for event in mine:
        involved = event.get("involvedObject") or {}
        rows.append(EventRow(_event_time(event), str(event.get("type") or ""), str(event.get("reason") or ""),
                             f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
                             str(event.get("message") or "").strip(), int(event.get("count") or 1),
                             hints.event_hints(event)))
    return rows


def job_status(api: client.ApiClient, targets: list[Target], namespace: str, name: str,
               recent: int = 10) -> JobStatus:
    target, obj = jobs.find(api, targets, namespace, name)
    pod_list = pods.list_pods(api, target, namespace, name)
    rows = pod_rows(pod_list, target, name)
    events = job_events(api, target, namespace, name, {r.name for r in rows})[-recent:]
    all_hints = hints.unique([h for r in rows for h in r.hints] +
                             [h for e in events if e.type == "Warning" for h in e.hints])
    return JobStatus(jobs.summary(obj, target), jobs.conditions(obj), rows, events, all_hints)
