"""`kubetrain logs`: one merged, prefixed stream from every replica of a job. The library API:

* ``print_logs(conn, namespace, name, target, options, sink, notice, archive=None) -> LogsRead``: the logs
  so far, merged in time order; returns the number of lines written and the replicas that could not be
  read because their node is down or their kubelet did not answer (`notice` said why). When the job's pods are gone, its
  archive (spec.archive, recorded on the job as the kubetrain.dev/archive annotation) is read instead, and
  `notice` says so; when the job is gone, `archive` (--archive) names it.
* ``follow_job_logs(conn, namespace, name, target, options, sink, notice) -> FollowResult``: waits
  through Pending (scheduling events go to `notice`), follows every pod across restarts, returns when the
  job has Succeeded, Failed or was deleted. `submit --follow` calls this.

`sink` gets each output line (prefixed, no newline) from one thread at a time, so lines never interleave;
`notice` gets human messages (stderr material). The CLI passes the lines through the progress renderer
(kubetrain.observe.render), which turns metrics lines into a progress line.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubetrain import jobs
from kubetrain.errors import ClusterError, UsageError
from kubetrain.jobs import nodes, targets
from kubetrain.jobs.logmerge import LineAssembler, Prefixer, merge
from kubetrain.jobs.logstream import PodFollower
from kubetrain.jobs.pending import PendingReporter
from kubetrain.jobs.pods import (
    Replica,
    check_replica_filter,
    matches,
    open_log,
    pods_list_fn,
    replica_of,
    select,
    sort_key,
)
from kubetrain.jobs.recreation import recreation_reason
from kubetrain.jobs.targets import Target
from kubetrain.kube import watch
from kubetrain.kube.connection import Connection
from kubetrain.kube.errors import BadRequest, NotFound, TimedOut, api_message, cluster_errors
from kubetrain.kube.events import uid_selector
from kubetrain.kube.objects import meta_of, parse_time
from kubetrain.kube.parallel import map_parallel
from kubetrain.kube.rest import path_of
from kubetrain.observe import nccl

if TYPE_CHECKING:
    from kubetrain.kube.rest import Rest

Sink = Callable[[str], None]
Notice = Callable[[str], None]
PARALLEL_READS = 16


@dataclass(frozen=True)
class LogOptions:
    replica: str = "all"  # all, a role (master, worker, node) or one replica (worker-2)
    since_seconds: int | None = None
    tail: int | None = None  # per replica, like kubectl --tail with a selector
    previous: bool = False  # the previous (crashed) container instance
    timestamps: bool = False  # keep the API's RFC 3339 timestamp after the prefix
    color: bool = False


@dataclass(frozen=True)
class LogsRead:
    lines: int
    unreachable: tuple[str, ...] = ()  # replicas not read: their node is down or their kubelet did not answer


@dataclass(frozen=True)
class FollowResult:
    state: str  # Succeeded, Failed or Deleted
    message: str  # the job's final condition message ("" if none)
    lines: int

    @property
    def ok(self) -> bool:
        return self.state == "Succeeded"


class _Output:
    """Formats and writes lines from many threads, one whole line at a time."""

    def __init__(self, sink: Sink, options: LogOptions) -> None:
        self.sink, self.timestamps = sink, options.timestamps
        self.prefixer = Prefixer(options.color)
        self.lines = 0
        self._lock = threading.Lock()
        self.closed = False  # once the command is over, threads still winding down write nothing

    def emit(self, label: str, stamp: str, text: str) -> None:
        line = self.prefixer.format(label, text, stamp if self.timestamps else "")
        with self._lock:
            if self.closed:
                return
            self.sink(line)
            self.lines += 1

    def notice_gate(self, notice: Notice) -> Notice:
        """`notice`, silenced once closed: a thread writing to stderr while the interpreter shuts down
        aborts it ("Fatal Python error: _enter_buffered_busy"), so nothing may write after close()."""
        def gated(text: str) -> None:
            with self._lock:
                if not self.closed:
                    notice(text)
        return gated

    def close(self) -> None:
        with self._lock:
            self.closed = True


# ---- the logs so far -------------------------------------------------------------------------------------
def print_logs(conn: Connection, namespace: str, name: str, target: str | Target | None, options: LogOptions,
               sink: Sink, notice: Notice, archive: str | None = None) -> LogsRead:
    """Every selected replica's log (or previous log), merged in time order. With no pods left, the job's
    archive (`archive`, else its annotation); with no job, `archive` if given."""
    wanted = check_replica_filter(options.replica)
    try:
        found, obj = jobs.find_job(conn.rest, namespace, name, target)
    except ClusterError as exc:
        if archive is None:
            if type(exc) is ClusterError:  # not a lost API server (Unreachable): the job may be gone
                jobs.check_namespace(conn.rest, namespace)  # a wrong -n reads the same for every command
                raise ClusterError(f"{exc}; if it had spec.archive, read that: --archive URL") from None
            raise
        return LogsRead(print_archive(archive, name, options, sink, notice, str(exc)))
    replicas = select(_replicas(conn.rest, found, namespace, name), wanted)
    if not replicas:
        url, state = archive or archive_of(obj), jobs.state(obj)
        if url is not None and (state in jobs.TERMINAL or _archived(url, name)):
            why = f"{found.kind} {name} has no pods left (state: {state})"
            return LogsRead(print_archive(url, name, options, sink, notice, why))
        notice(f"{found.kind} {name} has no pods yet (state: {state}); use -f to wait for them")
        return LogsRead(0)
    readable = [r for r in replicas if _readable(r, options.previous, notice)]
    down = nodes.down_nodes(conn.rest, readable)
    unreachable = [r.label for r in readable if _on_down_node(r, down, notice)]
    readable = [r for r in readable if r.label not in unreachable]
    output = _Output(sink, options)
    watch = nccl.SocketWatch(obj, notice)
    opened = map_parallel(lambda r: _open(conn.rest, namespace, r, options, notice, unreachable), readable,
                          PARALLEL_READS)
    sources = [(r.label, _lines(resp)) for r, resp in zip(readable, opened, strict=True) if resp is not None]
    for line in merge(sources, output.prefixer, options.timestamps):
        sink(line)
        watch(line)
        output.lines += 1
    return LogsRead(output.lines, tuple(r.label for r in replicas if r.label in unreachable))


# ---- the archive, once the pods (or the job) are gone ----------------------------------------------------
def archive_of(job: dict[str, Any]) -> str | None:
    """The job's spec.archive, as `kubetrain render` records it on the job (kubetrain.dev/archive)."""
    # not on the import path of `status`, `list` and `logs` (import budget, docs/performance.md)
    from kubetrain.render.context import ARCHIVE_ANNOTATION

    return (meta_of(job).get("annotations") or {}).get(ARCHIVE_ANNOTATION) or None


def _archived(url: str, name: str) -> bool:
    # not on the import path of `status`, `list` and `logs` (import budget, docs/performance.md)
    from kubetrain.observe.archive import archived_replicas

    return bool(archived_replicas(url, name))


def print_archive(url: str, name: str, options: LogOptions, sink: Sink, notice: Notice, why: str) -> int:
    """The job's archived logs, replica after replica (--replica and --tail apply; the archive has no
    timestamps), after one notice naming the archive. Returns lines written."""
    # not on the import path of `status`, `list` and `logs` (import budget, docs/performance.md)
    from kubetrain.observe.archive import archived_replicas

    wanted = check_replica_filter(options.replica)
    found = [(label, lines) for label, lines in archived_replicas(url, name)
             if wanted in ("all", label, label.rsplit("-", 1)[0])]
    if not found:
        which = "" if wanted == "all" else f" (--replica {wanted})"
        raise UsageError(f"{why}; no archived logs of {name}{which} in {url}")
    notice(f"{why}; reading its archive {url}")
    prefixer, written = Prefixer(options.color), 0
    for label, lines in found:
        kept: Iterable[str] = lines if options.tail is None else deque(lines, maxlen=options.tail)
        for text in kept:
            sink(prefixer.format(label, text))
            written += 1
    return written


def _replicas(rest: Rest, found: Target, namespace: str, name: str) -> list[Replica]:
    # not on the import path of `status`, `list` and `logs` (import budget, docs/performance.md)
    from kubetrain.jobs.pods import job_replicas

    return job_replicas(rest, found, namespace, name)


def _readable(replica: Replica, previous: bool, notice: Notice) -> bool:
    if previous and replica.restarts == 0:
        if replica.state == "terminated":
            notice(f"[{replica.label}] has not restarted: showing its terminated container "
                   f"({replica.reason or 'exit'} {replica.exit_code})")
            return True
        notice(f"[{replica.label}] has no previous container (0 restarts)")
        return False
    if not replica.started:
        why = replica.reason or replica.phase
        notice(f"[{replica.label}] {replica.pod} has not started ({why}); no logs yet")
        return False
    return True


def _on_down_node(replica: Replica, down: dict[str, nodes.NodeHealth], notice: Notice) -> bool:
    """A replica whose node is down is said so in one line and not read (the read would only wait)."""
    health = down.get(replica.node or "")
    if health is not None:
        notice(f"[{replica.label}] {replica.pod}: {health.describe()}; not waiting for its logs")
    return health is not None


def _open(rest: Rest, namespace: str, replica: Replica, options: LogOptions, notice: Notice,
          unreachable: list[str]) -> Any:
    previous = options.previous and replica.restarts > 0
    with cluster_errors(f"read the logs of pod {replica.pod} in namespace {namespace}"):
        try:
            return open_log(rest, namespace, replica.pod, replica.container, previous=previous,
                            since_seconds=options.since_seconds, tail_lines=options.tail)
        except TimedOut:
            silent = nodes.silent_kubelet(rest, replica, rest.kubelet_timeout, "logs")
            notice(f"[{replica.label}] {replica.pod}: {silent}")
            unreachable.append(replica.label)  # from a pool thread: list.append is atomic
            return None
        except (BadRequest, NotFound) as exc:  # the container has not started / the pod is gone
            notice(f"[{replica.label}] no logs: {api_message(exc)}")
            return None


def _lines(response: Any) -> Iterator[str]:
    """A response's lines as they arrive (so merging many large logs holds one line per pod)."""
    assembler = LineAssembler()
    try:
        with contextlib.suppress(TimeoutError):  # the kubelet stopped answering mid-log: what came is shown
            while chunk := response.read1(65536):
                yield from assembler.feed(chunk)
        yield from assembler.flush()
    finally:
        response.release_conn()


# ---- following -------------------------------------------------------------------------------------------
class _Feed:
    """The job and its pods, kept current by two list+watch threads (re-listing after 410 Gone)."""

    def __init__(self, rest: Rest, found: Target, namespace: str, name: str, timeout: float | None,
                 notice: Notice, owner_uid: str = "") -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.pods: dict[str, dict[str, Any]] = {}
        self.deleted: dict[str, dict[str, Any]] = {}  # pod name → its last state (why it went)
        self.owner_events: list[dict[str, Any]] = []  # the TrainingJob's Events since following began
        self.began = dt.datetime.now(dt.UTC).replace(microsecond=0)  # Event times have whole seconds
        self.job: dict[str, Any] | None = None
        self.stopped = threading.Event()
        self.synced: set[str] = set()  # "job", "pods": their first list has arrived
        self.timeout, self.notice = timeout, notice
        job_list = watch.rest_list(rest, jobs.path_of_job(found, namespace))
        self._start("job", job_list, field_selector=f"metadata.name={name}")
        # Only the job's watch reports a lost API server: both watches lose it at once.
        self._start("pods", pods_list_fn(rest, namespace), label_selector=found.pod_selector(name))
        if owner_uid:  # the controlling TrainingJob's Events: Hung, HangRestart, Straggler, Progressing...
            events = watch.rest_list(rest, path_of("", "v1", "events", namespace))
            self._start("owner", events, field_selector=uid_selector(owner_uid))

    def _start(self, kind: str, list_fn: Callable[..., Any], **kwargs: Any) -> None:
        on_retry = self.notice if kind == "job" else None

        def run() -> None:
            try:
                for event in watch.stream(list_fn, timeout=self.timeout, on_retry=on_retry, **kwargs):
                    if self.stopped.is_set():
                        return
                    self.events.put((kind, event))
            except Exception as exc:
                self.events.put(("error", exc))

        threading.Thread(target=run, name=f"watch-{kind}", daemon=True).start()

    def wait(self, timeout: float) -> bool:
        """Apply every queued event (waiting up to `timeout` for the first); True if anything changed."""
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            return False
        while True:
            self._apply(*item)
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                return True

    @property
    def ready(self) -> bool:
        return {"job", "pods"} <= self.synced

    def _apply(self, kind: str, event: Any) -> None:
        if kind == "error":
            raise event
        if kind == "owner":  # Events from before following began are not news
            if event.type == "SYNC":
                self.synced.add(kind)
                self.owner_events += [e for e in event.objects if (_when(e) or self.began) >= self.began]
            elif event.type == "ADDED" and kind in self.synced:
                self.owner_events.append(event.obj)
            return
        if event.type == "SYNC":
            self.synced.add(kind)
        if kind == "job":
            if event.type == "SYNC":
                self.job = event.objects[0] if event.objects else None
            else:
                self.job = None if event.type == "DELETED" else event.obj
            return
        if event.type == "SYNC":
            self.pods = {p["metadata"]["name"]: p for p in event.objects}
        elif event.type == "DELETED":
            self.pods.pop(event.obj["metadata"]["name"], None)
            self.deleted[event.obj["metadata"]["name"]] = event.obj
        else:
            self.pods[event.obj["metadata"]["name"]] = event.obj


def follow_job_logs(conn: Connection, namespace: str, name: str, target: str | Target | None = None,
                    options: LogOptions | None = None, sink: Sink = print, notice: Notice = lambda _: None,
                    poll: float = 0.25,
                    timeout: float | None = None) -> FollowResult:
    """Follow every selected replica until the job ends (or `timeout`: WaitTimeout); see the module docstring.
    A lost API server is retried until `timeout` (without one, for watch.RECONNECT_WINDOW)."""
    options = options or LogOptions()
    if options.previous:
        raise UsageError("--previous reads a finished container; it cannot be combined with -f")
    wanted = check_replica_filter(options.replica)
    found, obj = jobs.find_job(conn.rest, namespace, name, target)
    archived = _finished_from_archive(conn.rest, found, obj, namespace, name, options, sink, notice)
    if archived is not None:
        return archived
    watch = nccl.SocketWatch(obj, notice)  # called by _Output.emit under its lock, never after close()

    def watched(line: str) -> None:
        sink(line)
        watch(line)

    output = _Output(watched, options)
    follow = _Follow(conn.rest, found, namespace, name, wanted, options, output, output.notice_gate(notice))
    follow.owner = targets.trainingjob_ref(obj)
    try:
        with cluster_errors(f"watch {found.resource} {name} and its pods in namespace {namespace}"):
            return follow.run(poll, timeout)
    finally:
        output.close()


def _finished_from_archive(rest: Rest, found: Target, job: dict[str, Any], namespace: str, name: str,
                           options: LogOptions, sink: Sink, notice: Notice) -> FollowResult | None:
    """`logs -f` of a job that already ended and whose pods are gone: its archive, as `logs` without -f
    reads it (None when the job still runs, still has pods, or has no archive)."""
    state, url = jobs.state(job), archive_of(job)
    if url is None or state not in jobs.TERMINAL:
        return None
    if select(_replicas(rest, found, namespace, name), check_replica_filter(options.replica)):
        return None
    why = f"{found.kind} {name} has no pods left (state: {state})"
    lines = print_archive(url, name, options, sink, notice, why)
    return FollowResult(state, _final_message(job, state), lines)


class _Follow:
    def __init__(self, rest: Rest, found: Target, namespace: str, name: str, wanted: str,
                 options: LogOptions, output: _Output, notice: Notice) -> None:
        self.rest, self.found, self.namespace, self.name, self.wanted = rest, found, namespace, name, wanted
        self.options, self.output, self.notice = options, output, notice
        self.followers: dict[str, PodFollower] = {}
        self.retired: list[PodFollower] = []  # followers of pods re-created since: they drain, then end
        self.reported: set[str] = set()  # uids of re-created pods already reported
        self.pending = PendingReporter(rest, namespace, found.kind, name, notice)
        self.owner: dict[str, Any] | None = None  # the controlling TrainingJob's ownerReference

    def run(self, poll: float, timeout: float | None = None) -> FollowResult:
        feed = _Feed(self.rest, self.found, self.namespace, self.name, timeout, self.notice,
                     str((self.owner or {}).get("uid") or ""))
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                feed.wait(poll)
                if deadline is not None and time.monotonic() > deadline:
                    raise watch.WaitTimeout(f"timed out after {timeout:g}s following {self.found.kind} "
                                            f"{self.name}")
                if not feed.ready:
                    continue
                result = self._round(feed)
                if result is not None:
                    return result
        finally:
            feed.stopped.set()
            for follower in [*self.followers.values(), *self.retired]:
                follower.stop()
            self.output.close()  # then no thread still winding down writes anything

    def _round(self, feed: _Feed) -> FollowResult | None:
        job = feed.job
        replicas = [r for r in (replica_of(p, self.found, self.name) for p in feed.pods.values())
                    if matches(r, self.wanted)]
        for event in feed.owner_events:
            kind = "Warning " if event.get("type") == "Warning" else ""
            self.notice(f"TrainingJob {self.name}: {kind}{event.get('reason')}: {event.get('message')}")
        feed.owner_events.clear()
        self._sync_followers(sorted(replicas, key=sort_key), set(feed.pods), feed.deleted)
        if job is None:
            return self._finish("Deleted", f"{self.found.kind} {self.name} was deleted")
        state = jobs.state(job)
        if state in jobs.TERMINAL:
            return self._finish(state, _final_message(job, state))
        self.pending.report([r for r in replicas if not r.started], bool(replicas), state, time.monotonic(),
                            str(meta_of(job).get("uid") or ""))
        return None

    def _sync_followers(self, replicas: Iterable[Replica], present: set[str],
                        deleted: dict[str, dict[str, Any]]) -> None:
        now = time.monotonic()
        for replica in replicas:
            follower = self.followers.get(replica.pod)
            if follower is not None and follower.replica.uid != replica.uid:
                self._recreated(follower, replica, deleted.get(replica.pod))
                follower = None
            if follower is None and replica.started:
                follower = self._start_follower(replica)
            if follower is not None:
                follower.update(replica)
        for pod, follower in list(self.followers.items()):
            if pod not in present:
                follower.stop()
            follower.tick(now)
        for follower in list(self.retired):
            follower.tick(now)
            if not follower.is_alive():
                self.retired.remove(follower)

    def _recreated(self, old: PodFollower, new: Replica, last: dict[str, Any] | None) -> None:
        """The pod was deleted and created again (a new uid under its name): said once, with why."""
        old.stop()
        self.retired.append(self.followers.pop(new.pod))
        if new.uid in self.reported:
            return
        self.reported.add(new.uid)
        gone = last if last is not None and meta_of(last).get("uid") == old.replica.uid else old.replica.obj
        why = recreation_reason(gone, self._trainingjob())
        self.notice(f"[{new.label}] pod {new.pod} was re-created" + (f": {why}" if why else ""))

    def _trainingjob(self) -> dict[str, Any] | None:
        """The controlling TrainingJob now (its status.hang says when the hang policy last restarted the pods)."""
        if not self.owner:
            return None
        try:
            return jobs.get(self.rest, targets.TRAININGJOB, self.namespace, str(self.owner.get("name")))
        except Exception:  # not readable (RBAC) or gone: the reason is then what the pod says
            return None

    def _start_follower(self, replica: Replica) -> PodFollower:
        since, tail = self.options.since_seconds, self.options.tail
        opener = functools.partial(open_log, self.rest, self.namespace)
        follower = PodFollower(opener, self.namespace, replica, self.output.emit, self.notice, since, tail)
        self.followers[replica.pod] = follower
        follower.start()
        return follower

    def _finish(self, state: str, message: str, timeout: float = 30.0) -> FollowResult:
        """Let every follower write its pod's last lines, then report."""
        followers = [*self.followers.values(), *self.retired]
        for follower in followers:
            follower.stop()
        deadline = time.monotonic() + timeout
        while any(f.is_alive() for f in followers) and time.monotonic() < deadline:
            for follower in followers:
                follower.tick(time.monotonic())
            time.sleep(0.05)
        return FollowResult(state, message, self.output.lines)


def _when(event: dict[str, Any]) -> dt.datetime | None:
    return parse_time(event.get("lastTimestamp") or event.get("eventTime") or meta_of(event).get("creationTimestamp"))


def _final_message(job: dict[str, Any], state: str) -> str:
    wanted = {"Succeeded": ("Succeeded", "Complete"), "Failed": ("Failed",)}[state]
    for condition in reversed(jobs.conditions(job)):
        if condition.get("type") in wanted and condition.get("status") == "True":
            return str(condition.get("message") or condition.get("reason") or "")
    return ""
