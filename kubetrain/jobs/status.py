"""A job's status: its conditions, every replica's pod, recent Events, and what they mean (hints)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kubetrain import jobs
from kubetrain.errors import ClusterError
from kubetrain.jobs import hints, nodes, pods
from kubetrain.jobs.targets import PYTORCHJOB, TRAININGJOB, Target, controlling_trainingjob, trainingjob_ref
from kubetrain.kube.events import list_events, list_selected, selectors, uid_selector
from kubetrain.kube.objects import JOB_LABEL, meta_of, parse_time, status_of
from kubetrain.kube.parallel import start
from kubetrain.observe.nccl import requested_fabric, socket_fallback, transports
from kubetrain.observe.progress import ProgressTracker
from kubetrain.podenv import TRACKING_ENV
from kubetrain.queues import workloads as queues

if TYPE_CHECKING:
    from kubetrain.kube.rest import Rest

JOB_KINDS = {"PyTorchJob", "TrainJob", "JobSet", "Job", "Service"}
CREATED_POD = re.compile(r"Created pod: (\S+)")  # the training-operator's SuccessfulCreatePod event


@dataclass(frozen=True)
class PodRow:
    replica: str
    name: str
    phase: str
    node: str
    restarts: int
    last_termination: str
    hints: list[str] = field(default_factory=list)
    recreated: int = 0  # times the operator created this replica's pod again (restarts do not count those)
    node_state: str = ""  # when its node is down: "NotReady, 52 s since its kubelet posted"


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
    timeline: str = ""  # where the time went (kubetrain.jobs.timing), when asked for
    progress: dict[str, Any] | None = None  # status.progress of the TrainingJob that owns the job, if any
    tracking: dict[str, Any] | None = None  # the tracked run's pages (status.tracking), if any

    def as_dict(self) -> dict[str, Any]:
        return {**self.job.as_dict(), "conditions": self.conditions, "pods": [asdict(p) for p in self.pods],
                "events": [asdict(e) for e in self.events], "hints": self.hints,
                **({"timeline": self.timeline} if self.timeline else {}),
                **({"progress": self.progress} if self.progress else {}),
                **({"tracking": self.tracking} if self.tracking else {})}


MIRRORED_CONDITIONS = ("Diverged", "NodeLost")  # the TrainingJob's own conditions that its child's status lacks


@dataclass(frozen=True)
class ControllerView:
    """What the kubetrain controller keeps on the TrainingJob that owns a job (from rank 0's metrics lines and
    its pods' nodes)."""

    progress: dict[str, Any] | None = None
    conditions: list[dict[str, Any]] = field(default_factory=list)  # the Diverged and NodeLost conditions
    tracking: dict[str, Any] | None = None


def controller_view(rest: Rest, namespace: str, obj: dict[str, Any]) -> ControllerView:
    """The controller's view of this job; empty for a job without a TrainingJob, or one we may not read."""
    owner = controlling_trainingjob(obj)
    if owner is None:
        return ControllerView()
    try:
        found = jobs.get(rest, TRAININGJOB, namespace, owner)
    except ClusterError:  # no RBAC on TrainingJobs, or the CRD is gone: the child's status still stands
        return ControllerView()
    status = status_of(found or {})
    return ControllerView(status.get("progress") or None, [c for c in status.get("conditions") or []
                                                           if c.get("type") in MIRRORED_CONDITIONS],
                          status.get("tracking") or None)


def run_links(rest: Rest, namespace: str | None) -> dict[tuple[str, str], str]:
    """Each TrainingJob's tracked run page (status.tracking.runURL) by (namespace, name); {} when TrainingJobs
    cannot be listed (no CRD, no RBAC)."""
    try:
        found = jobs.list_objects(rest, TRAININGJOB, namespace)
    except ClusterError:
        return {}
    return {(meta_of(obj).get("namespace", ""), meta_of(obj).get("name", "")): str(url) for obj in found
            if (url := (status_of(obj).get("tracking") or {}).get("runURL"))}


def tracked_runs(lines: list[str]) -> dict[str, Any] | None:
    """The runs' pages in rank 0's log (its `tracking` metrics records), for a job without a TrainingJob."""
    tracker = ProgressTracker()
    for line in lines:
        tracker.feed(line)
    return {"runs": tracker.runs} if tracker.runs else None


def tracks(obj: Any) -> bool:
    """Does the job set spec.tracking (its containers get KUBETRAIN_TRACKING)?"""
    if isinstance(obj, dict):
        env = obj.get("env")
        if isinstance(env, list) and any(isinstance(e, dict) and e.get("name") == TRACKING_ENV for e in env):
            return True
        return any(tracks(value) for value in obj.values() if isinstance(value, dict | list))
    return any(tracks(item) for item in obj if isinstance(item, dict | list)) if isinstance(obj, list) else False


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
               event.get("eventTime") or meta_of(event).get("creationTimestamp") or "")


def _sort_key(event: dict[str, Any]) -> tuple[dt.datetime, str]:
    when = parse_time(_event_time(event)) or dt.datetime.min.replace(tzinfo=dt.UTC)
    return when, str(meta_of(event).get("resourceVersion", ""))


def _expected_pods(obj: dict[str, Any], target: Target) -> list[str]:
    """A PyTorchJob's pod names (NAME-master-0, NAME-worker-3): deleted pods' Events are found by name."""
    if target is not PYTORCHJOB:
        return []
    name = str(meta_of(obj).get("name") or "")
    replicas = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    return [f"{name}-{kind.lower()}-{i}" for kind, spec in replicas.items()
            for i in range(int(spec.get("replicas", 1)))]


STATUS_POD_EVENT_LISTS = 7  # + the job's own list: 8 lists, one round of events.PARALLEL
# Healthy pods' Events are routine (Scheduled, Pulled, Created, Started) and each list is a scan of the
# namespace's Events by the apiserver (~30 ms each with 1,300 Events): status reads one healthy pod's, the
# master's (ranked first), which gives the timeline its scheduling and image pull.
STATUS_HEALTHY_POD_EVENT_LISTS = 1


@dataclass(frozen=True)
class EventSubjects:
    """Whose Events to list: UIDs (the job, its current pods) and (kind, name)s (deleted pods, a JobSet)."""

    uids: set[str]
    named: list[tuple[str, str]]
    omitted: int = 0  # pods that need explaining whose Events were not listed (status's bound)


def event_subjects(obj: dict[str, Any], target: Target, pod_list: list[dict[str, Any]],
                   max_pods: int | None = None, max_healthy: int | None = None) -> EventSubjects:
    """The job, and its pods with the ones that need explaining first: not Running-and-ready or restarted, then
    deleted ones, then at most `max_healthy` healthy ones; at most `max_pods` pods in all (the field selectors
    have no OR, so each pod is one request: without a bound, a 64-replica job's status made 65 lists)."""
    meta = meta_of(obj)
    present = {str(meta_of(p).get("name") or "") for p in pod_list}
    deleted = [("Pod", pod) for pod in _expected_pods(obj, target) if pod not in present]
    ranked = pods.replicas_of(pod_list, target, str(meta.get("name") or ""))  # master first
    sick = [r.uid for r in ranked if not _healthy(r)]
    healthy = [r.uid for r in ranked if _healthy(r)]
    troubled: list[str | tuple[str, str]] = [*sick, *deleted]
    kept = [*troubled, *healthy[:max_healthy]][:max_pods]
    named = [s for s in kept if isinstance(s, tuple)]
    if target is not PYTORCHJOB:
        named.append(("JobSet", str(meta.get("name") or "")))
    uids = {str(meta.get("uid") or ""), _owner_uid(obj)} | {s for s in kept if isinstance(s, str)}
    return EventSubjects(uids - {""}, named, max(0, len(troubled) - len(kept)))


def _owner_uid(obj: dict[str, Any]) -> str:
    """The controlling TrainingJob's uid ("" without one): its Events (Hung, HangRestart...) are the job's."""
    return str((trainingjob_ref(obj) or {}).get("uid") or "")


def _healthy(replica: pods.Replica) -> bool:
    return replica.phase == "Succeeded" or (replica.phase == "Running" and replica.state == "running"
                                             and not replica.restarts and not replica.deleting)


def job_event_dicts(rest: Rest, target: Target, namespace: str, obj: dict[str, Any],
                    pod_list: list[dict[str, Any]], subjects: EventSubjects | None = None,
                    listed: dict[str, list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """Events of this incarnation of the job: by UID for the job and its current pods; by name (and not older
    than the job) for pods already deleted and a TrainJob's JobSet. Oldest first. All pods' unless
    `subjects` (event_subjects) says whose; `listed`: lists already read (read_in_parallel)."""
    chosen = subjects or event_subjects(obj, target, pod_list)
    items = list_events(rest, namespace, chosen.uids, chosen.named, listed)
    return own_events(items, chosen.uids, str(meta_of(obj).get("creationTimestamp") or ""))


def own_events(items: list[dict[str, Any]], uids: set[str], created: str) -> list[dict[str, Any]]:
    """Events about these UIDs, or (found by name: a deleted pod's) not older than the job; oldest first."""
    born = _sort_key({"lastTimestamp": created})[0]
    mine = [e for e in items if str((e.get("involvedObject") or {}).get("uid") or "") in uids
            or _sort_key(e)[0] >= born]
    return sorted(mine, key=_sort_key)


def recreations(events: list[dict[str, Any]]) -> dict[str, int]:
    """Pod name → how many times the operator created it beyond the first (from SuccessfulCreatePod)."""
    created: dict[str, int] = {}
    for event in events:
        if event.get("reason") == "SuccessfulCreatePod" and (found := CREATED_POD.search(str(event.get("message")))):
            created[found.group(1)] = created.get(found.group(1), 0) + int(event.get("count") or 1)
    return {pod: count - 1 for pod, count in created.items() if count > 1}


def job_events(rest: Rest, target: Target, namespace: str, obj: dict[str, Any],
               pod_list: list[dict[str, Any]]) -> list[EventRow]:
    """The job's Events, oldest first."""
    return event_rows(job_event_dicts(rest, target, namespace, obj, pod_list))


def event_rows(mine: list[dict[str, Any]]) -> list[EventRow]:
    """One row per distinct Event (oldest first). Events that differ only past their first SHORT characters
    (an operator retrying the same failed update, each with a new dump of the object) are one row: the
    latest time, the counts added up."""
    rows: dict[tuple[str, ...], EventRow] = {}
    for event in mine:
        involved = event.get("involvedObject") or {}
        row = EventRow(_event_time(event), str(event.get("type") or ""), str(event.get("reason") or ""),
                       f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
                       str(event.get("message") or "").strip(), int(event.get("count") or 1), hints.event_hints(event))
        key = (row.type, row.reason, row.object, hints.shorten(row.message))
        if (seen := rows.pop(key, None)) is not None:
            row = replace(row, count=row.count + seen.count, hints=hints.unique([*seen.hints, *row.hints]))
        rows[key] = row  # re-inserted: the dict's order stays "by latest occurrence"
    return list(rows.values())


def job_status(rest: Rest, targets: list[Target] | None, namespace: str, name: str,
               recent: int = 10, timeline: bool = False) -> JobStatus:
    """`targets`: the kinds the job may be (None: whichever the cluster serves)."""
    target, obj = jobs.find(rest, targets, namespace, name)
    fabric = requested_fabric(obj)
    pod_list, listed, head, unread = read_in_parallel(rest, target, namespace, obj,
                                                      head=timeline or bool(fabric) or tracks(obj))
    subjects = event_subjects(obj, target, pod_list, STATUS_POD_EVENT_LISTS, STATUS_HEALTHY_POD_EVENT_LISTS)
    event_dicts = job_event_dicts(rest, target, namespace, obj, pod_list, subjects, listed)
    again = recreations(event_dicts)
    down = nodes.down_nodes(rest, pods.replicas_of(pod_list, target, name))
    rows = [replace(r, recreated=again.get(r.name, 0), node_state=_node_state(down.get(r.node)))
            for r in pod_rows(pod_list, target, name)]
    events = event_rows(event_dicts)[-recent:] if recent else []
    recreated = [f"pod {r.name} was re-created {r.recreated} time(s) by the operator (its restart count "
                 f"starts again each time): see why with `kubetrain events {name}`" for r in rows if r.recreated]
    queued = [_no_pods(line, pod_list)] if (line := queues.job_hint(rest, obj)) else []  # Kueue: one line
    queued += [line] if (line := operator_hint(obj, target)) else []
    queued += [_down_hint(health, rows) for health in down.values()] + ([unread] if unread else [])
    if subjects.omitted:
        queued.append(f"Events of {subjects.omitted} more troubled pod(s) not read (status lists at most "
                      f"{STATUS_POD_EVENT_LISTS} pods' Events): `kubetrain events {name}`")
    if fallback := socket_fallback(fabric, transports(head)):
        queued.append(fallback)
    if waiting := pods.waiting_for_claims(pod_list):
        # DRA's device matching loads only for pods that wait for devices (import budget of `status`)
        from kubetrain.jobs import devices

        queued += devices.pending_claim_hints(rest, namespace, f"{JOB_LABEL}={name}", waiting)
    all_hints = hints.unique(queued + recreated + [h for r in rows for h in r.hints] +
                             [h for e in events if e.type == "Warning" for h in e.hints])
    when = ""
    if timeline:
        from kubetrain.jobs.timing import timeline_of  # reuses the job, pods, Events and log head read above

        when = timeline_of(obj, pod_list, event_dicts, head)
    view = controller_view(rest, namespace, obj)
    tracking = view.tracking or (tracked_runs(head) if tracks(obj) else None)
    return JobStatus(jobs.summary(obj, target), [*jobs.conditions(obj), *view.conditions], rows, events, all_hints,
                     when, view.progress, tracking)


def _no_pods(line: str, pod_list: list[dict[str, Any]]) -> str:
    """Kueue evicts a job whose pods are not Ready in time (PodsReadyTimeout), also when there are none: then
    readiness is not what to look at, but why no pod was created (the operator's Events, among the hints)."""
    if pod_list or "PodsReadyTimeout" not in line:
        return line
    return (f"{line.split(' (', 1)[0]}: no pod was ever created, so Kueue's waitForPodsReady timed out "
            "(PodsReadyTimeout); look at why none was created, not at readiness")


def _node_state(health: nodes.NodeHealth | None) -> str:
    if health is None:
        return ""
    posted = health.posted()
    return health.state() + (f", {posted.removeprefix('its ')}" if posted else "")


def _down_hint(health: nodes.NodeHealth, rows: list[PodRow]) -> str:
    on = ", ".join(r.name for r in rows if r.node == health.name)
    return (f"{health.describe()}: the logs and execs of its pods ({on}) wait for it; Kubernetes evicts them "
            "if it does not come back (kubectl describe node " + health.name + ")")


Reads = tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], list[str], str]


def read_in_parallel(rest: Rest, target: Target, namespace: str, obj: dict[str, Any], head: bool = False) -> Reads:
    """(the job's pods, Events lists by field selector, rank 0's log head if `head` and why it could not be
    read), read side by side rather
    than one after the other. The Events lists are those status reads whatever the pods are: the job's own, a
    TrainJob's JobSet's, and a PyTorchJob's master pod's (by name; its UID comes with the pods, and its list
    then also serves as the list by that UID). The log head (the timeline's) is read once the pods are known."""
    meta = meta_of(obj)
    name = str(meta.get("name") or "")
    master = [("Pod", pod) for pod in _expected_pods(obj, target) if pod.endswith("-master-0")]
    early = selectors([str(meta.get("uid") or ""), _owner_uid(obj)],
                      master if target is PYTORCHJOB else [("JobSet", name)])
    reading = start(list_selected, rest, namespace, early)
    pod_list = pods.list_pods(rest, target, namespace, name)
    if head:
        # not on the import path of `status`, `list` and `logs` (import budget, docs/performance.md)
        from kubetrain.jobs.timing import rank0_head

        heading = start(rank0_head, rest, target, namespace, name, pod_list)
    listed = reading.result()
    lines, unread = heading.result() if head else ([], "")
    uids = {str(meta_of(p).get("name")): str(meta_of(p).get("uid") or "")
            for p in pod_list}
    for kind, pod in master:  # the master's list by name also answers the list by its current UID
        if uid := uids.get(pod):
            by_name = listed[selectors(named=[(kind, pod)])[0]]
            listed[uid_selector(uid)] = [e for e in by_name if (e.get("involvedObject") or {}).get("uid") == uid]
    return pod_list, listed, lines, unread


UNRECONCILED_AFTER = 15  # seconds: the operator sets a first condition within a second or two of a create


def operator_hint(obj: dict[str, Any], target: Target, now: dt.datetime | None = None) -> str | None:
    """A job that nobody has given a status in UNRECONCILED_AFTER seconds: its operator is not running
    (stopped, crash-looping, or without its leader Lease). Named, with where to look."""
    if status_of(obj).get("conditions"):
        return None
    created = str(meta_of(obj).get("creationTimestamp") or "")
    born = parse_time(created)
    if born is None:
        return None
    waited = ((now or dt.datetime.now(dt.UTC)) - born).total_seconds()
    if waited < UNRECONCILED_AFTER:
        return None
    where = ", ".join(f"kubectl -n {ns} get deployment {name}" for ns, name in target.operators[:1])
    return (f"no status from the {target.operator_name} after {int(waited)} s: it is not reconciling this job "
            f"(stopped or not the leader?): check it{': ' + where if where else ''}")
