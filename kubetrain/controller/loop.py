"""`kubetrain controller run`: informers → work queue → reconcile, behind a Lease.

Every TrainingJob event and every event of a child it controls enqueues the TrainingJob's key; workers
reconcile keys from the informers' caches (no extra GETs) and write only what changed: the child when it is
missing, drifted or outdated, the status when it differs. A failed reconcile retries that key alone with
exponential backoff. After a restart, the first list re-enqueues every TrainingJob; server-side apply of
the deterministic child names makes that a no-op for children that exist, so nothing is duplicated.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

from kubetrain.controller import hangs, kube, kueue, mirror, nodeloss, statusprogress
from kubetrain.controller.crd import GROUP, PLURAL, VERSION
from kubetrain.controller.faults import ErrorCounter, Fanout
from kubetrain.controller.informer import Informer, Key, wait_synced
from kubetrain.controller.queue import WorkQueue
from kubetrain.controller.reconcile import (
    Desired,
    DesiredCache,
    checkpoint_dir_of,
    keep_admission,
    now,
    owned_by,
    owner_name,
    update_policy,
)
from kubetrain.controller.written import WrittenStatus
from kubetrain.jobs import apply, targets
from kubetrain.jobs.crud import TERMINAL
from kubetrain.jobs.crud import state as child_state
from kubetrain.jobs.targets import Target
from kubetrain.kube import watch
from kubetrain.kube.objects import meta_of, status_of
from kubetrain.kube.rest import Rest
from kubetrain.queues import workloads as queues
from kubetrain.sweeps import resource as sweep_resource

log = logging.getLogger("kubetrain.controller")
MANAGED = "app.kubernetes.io/managed-by=kubetrain"
CONFIGMAP_CACHE = 16  # code ConfigMaps kept in memory (each ≤ 1 MiB)
# How long shutdown waits for the reconciles in flight; under the Deployment's 30 s termination grace period.
DRAIN_SECONDS = 15.0


@dataclass(frozen=True)
class Settings:
    namespace: str | None = None  # None: every namespace (ClusterRole); else only this one (Role)
    workers: int = 16
    update_policy: str = "report"  # report | recreate | continue (a TrainingJob's annotation overrides it)
    progress_interval: float = 30.0  # seconds between progress reads of a running job; 0 disables
    progress_tail: int = 200  # log lines read per progress read (the tail only)
    hang_interval: float = 30.0  # seconds between reads of a running job's rank records; 0 disables
    parallel_reads: int = 8  # jobs whose pods the progress and hang rounds read at once


@dataclass
class Controller:
    rest: Rest
    settings: Settings
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.queue = WorkQueue()
        # Workers, informers, Event senders and the progress reader each hold at most one connection.
        self.counter = kube.RequestCounter(self.rest)
        self.events = kube.EventRecorder(self.rest)
        self.desired = DesiredCache()
        self.served = [t.name for t in targets.installed(self.rest)]
        self.jobs = self._informer(GROUP, VERSION, PLURAL, self._on_job)
        self.children = {t.kind: self._informer(t.group, t.version, t.plural, self._on_child, label_selector=MANAGED)
                         for t in targets.TARGETS.values() if t.name in self.served}
        kueue_version = kueue.served_version(self.rest)  # Kueue installed later: restart the controller
        self.workloads = (self._informer(queues.GROUP, kueue_version, kueue.PLURAL, self._on_workload)
                          if kueue_version else None)
        self.sweep_queue = WorkQueue()  # one worker: a sweep's decisions are made one at a time
        self.sweeps = self._sweep_informer()
        self.sweeper = self._sweep_reconciler()
        self.configmaps: dict[Key, dict[str, Any]] = {}
        # The child as we last applied it: its generation tells drift apart, and it stands in for the cache
        # until the watch delivers it (no second create, no duplicate Event).
        self.applied: dict[Key, dict[str, Any]] = {}
        self.written = WrittenStatus()  # uid → status we last wrote, until the cache holds it
        self.reconciles = 0
        self.failures = 0
        self.errors = ErrorCounter()  # per loop and kind, for /metrics
        self.progress_rounds = 0
        self.progress_seconds = 0.0
        self.progress: Fanout[bool] = Fanout("progress", self.errors, self.settings.parallel_reads)
        self.threads: list[threading.Thread] = []
        self.workers: list[threading.Thread] = []  # the reconciling ones, which shutdown waits for
        self.hangs = hangs.ClusterHangWatch(self.rest, self.jobs, self._spec_of, self.events.record, self.queue.add,
                                     errors=self.errors, parallel=self.settings.parallel_reads)

    def _informer(self, group: str, version: str, plural: str, handler: Any, **kwargs: Any) -> Informer:
        list_fn = kube.custom_list_fn(self.rest, group, version, plural, self.settings.namespace)
        return Informer(plural, list_fn, handler, **kwargs)

    def _sweep_informer(self) -> Informer | None:
        """Sweeps, when their CRD is served (installed later: restart the controller) and Optuna is installed."""
        if not targets.serves(self.rest, sweep_resource.GROUP, sweep_resource.VERSION, sweep_resource.PLURAL):
            return None
        if importlib.util.find_spec("optuna") is None:
            log.warning("controller: Sweeps are not reconciled: install kubetrain[sweeps] (Optuna)")
            return None
        return self._informer(sweep_resource.GROUP, sweep_resource.VERSION, sweep_resource.PLURAL, self._on_sweep)

    def _sweep_reconciler(self) -> Any:
        if self.sweeps is None:
            return None
        from kubetrain.controller.sweeps import SweepReconciler  # imports Optuna: the `sweeps` extra

        return SweepReconciler(self.rest, self.sweeps, self.jobs, self.events.record)

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        """Start informers and workers; returns once the caches have synced."""
        informers = [self.jobs, *self.children.values(), *([self.workloads] if self.workloads else []),
                     *([self.sweeps] if self.sweeps else [])]
        for informer in informers:
            self._spawn(informer.run, self.stop, name=f"informer-{informer.name}")
        wait_synced(informers, self.stop)
        for index in range(self.settings.workers):
            self.workers.append(self._spawn(self._work, self.queue, self.reconcile, name=f"worker-{index}"))
        if self.sweeper is not None:
            self.workers.append(self._spawn(self._work, self.sweep_queue, self.sweeper.reconcile, name="sweeps"))
        if self.settings.hang_interval > 0:
            self._spawn(self.hangs.run, self.stop, self.settings.hang_interval, name="hangs")
        log.info("controller: caches synced (%d TrainingJobs); %d workers", len(self.jobs.items()),
                 self.settings.workers)

    def _spawn(self, target: Any, *args: Any, name: str) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread

    def shutdown(self, grace: float = DRAIN_SECONDS) -> None:
        """Take no new work, let the reconciles in flight end (a TrainingJob just created still records its
        Event), then send the Events waiting. The worker threads are daemons: a process that returned without
        waiting for them would cut a reconcile between its write and its Event."""
        self.stop.set()
        self.queue.close()
        self.sweep_queue.close()
        deadline = time.monotonic() + grace
        for worker in self.workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        self.events.close()
        self.progress.close()

    def poll_progress(self) -> None:
        """One progress round (every job's log tail, concurrently); a failure is counted, never raised."""
        began = time.monotonic()
        try:
            statusprogress.poll_once(self.rest, self.jobs, self.settings.progress_tail, self.progress)
        except Exception as exc:
            self.errors.record("progress", ("*", "round"), exc)
        self.progress_rounds += 1
        self.progress_seconds += time.monotonic() - began
        for obj in self.sweeps.items() if self.sweeps is not None else []:
            self.sweep_queue.add(key_of(obj))  # a sweep's budget (maxSeconds) runs out with no event

    def _work(self, queue: WorkQueue, reconcile: Any) -> None:
        while not self.stop.is_set():
            key = queue.get()
            if key is None:
                return
            try:
                reconcile(cast(Key, key))
                queue.forget(key)
            except Exception as exc:  # one object's failure backs off alone, never stops the loop
                self.failures += 1
                delay = queue.retry(key)
                self.errors.record("reconcile", cast(Key, key), exc, f"in {delay:.1f}s")
            finally:
                queue.done(key)

    # ------------------------------------------------------------------ events
    def _on_job(self, obj: dict[str, Any]) -> None:
        meta = meta_of(obj)
        key = (meta.get("namespace", ""), meta.get("name", ""))
        self.written.delivered(str(meta.get("uid")), str(meta.get("resourceVersion")), self.jobs.get(key) is None)
        self.queue.add(key)
        if (sweep := sweep_resource.sweep_of(obj)) is not None:
            self.sweep_queue.add(sweep)

    def _on_sweep(self, obj: dict[str, Any]) -> None:
        self.sweep_queue.add(key_of(obj))

    def _on_child(self, obj: dict[str, Any]) -> None:
        owner = owner_name(obj)
        if owner:
            key = (meta_of(obj).get("namespace", ""), owner)
            if self.children[str(obj.get("kind"))].get(watch.key(obj)) is None:
                self.applied.pop(key, None)  # deleted: the next reconcile creates it again
            self.queue.add(key)

    def _on_workload(self, wl: dict[str, Any]) -> None:
        key = kueue.owner_key(wl)
        if key is None or self.jobs.get(key) is None:
            return
        self.queue.add(key)
        if self.workloads is not None and not kueue.waiting(wl):  # the positions behind it moved up
            for sibling in kueue.siblings(wl, self.workloads.items()):
                self.queue.add(sibling)

    def _queued(self, want: Desired, child: dict[str, Any] | None) -> list[dict[str, Any]] | None:
        """Queued/Admitted from the child's Workload; None without Kueue or without a queue."""
        queue = want.job.spec.scheduling.queue if want.job else None
        if not queue or self.workloads is None:
            return None
        namespace = want.job.metadata.namespace if want.job else None
        candidates = [w for w in self.workloads.items() if meta_of(w).get("namespace") == namespace]
        return kueue.conditions(queue, child, candidates)

    # ------------------------------------------------------------------ reconcile
    def reconcile(self, key: Key) -> None:
        self.reconciles += 1
        obj = self.jobs.get(key)
        if obj is None or meta_of(obj).get("deletionTimestamp"):
            self.applied.pop(key, None)
            return  # the garbage collector deletes the children (controller ownerReferences)
        latest = self._latest(obj)
        current_dir = status_of(latest).get("checkpointDir")
        want = self.desired.get(obj, self.served, self._configmap, current_dir)
        child: dict[str, Any] | None = None
        extra: list[dict[str, Any]] = []
        if not want.problems:
            child, extra = self._sync_child(key, obj, want)
        latest = self._latest(obj)  # a recreation wrote the new child's checkpoint directory
        if any(c["type"] == "SpecChanged" and c["reason"] == "Recreating" for c in extra):
            child = None  # the old child, going: its phase (say Succeeded) is not this generation's (Pending)
        if child is not None and child_state(child) in hangs.WATCHED_PHASES:
            extra = [*extra, *hangs.carried(status_of(latest), self.hangs.conditions.get(key)),
                     *nodeloss.carried(status_of(latest), self.hangs.nodes.conditions.get(key))]
        status = mirror.status_for(latest, want, child, extra, self._queued(want, child))
        current_dir = status_of(latest).get("checkpointDir")  # kept as it is while the spec is invalid
        if ckpt := current_dir if want.problems else checkpoint_dir_of(want.job, current_dir):
            status["checkpointDir"] = ckpt
        if child is not None and want.target and self._ended(latest, status):
            status = mirror.with_divergence(self._with_final_progress(key, want.target, status, latest),
                                            status_of(latest))
        for reader in ("hang", "objective"):  # written by the hang watch and the progress reader: kept as they are
            if reader not in status and (kept := status_of(latest).get(reader)):
                status[reader] = kept
        self._write_status(obj, status_of(latest), status)

    def _ended(self, latest: dict[str, Any], status: dict[str, Any]) -> bool:
        """The child just ended (or ended while no controller ran): its progress is read once more."""
        before = status_of(latest).get("phase")
        return self.settings.progress_interval > 0 and status["phase"] in TERMINAL and before not in TERMINAL

    def _with_final_progress(self, key: Key, target: str, status: dict[str, Any], latest: dict[str, Any]
                             ) -> dict[str, Any]:
        """The last metrics line of the finished run (the periodic reads stop at Running: without this, a
        Succeeded job would show its last sample, e.g. 680/720)."""
        try:
            lines = statusprogress.read_tail(self.rest, targets.TARGETS[target], key[0], key[1],
                                             self.settings.progress_tail)
        except Exception as exc:  # pods gone (cleanPodPolicy) or unreadable: keep what was read before
            log.info("final progress of %s/%s: %s", key[0], key[1], exc)
            return status
        if (metric := statusprogress.objective_metric(latest)) and (
                objective := statusprogress.objective_of(lines, metric, status_of(latest).get("objective"))):
            status = {**status, "objective": objective}  # a sweep reads the trial's result with its phase
        final = statusprogress.progress_of(lines)
        if not final:
            return status
        removed = {k: None for k in status.get("progress") or {} if k not in final}  # e.g. the ETA
        return {**status, "progress": {**removed, **final, "updateTime": now()}}

    def _sync_child(self, key: Key, obj: dict[str, Any], want: Desired
                    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """Create, keep or replace the child; returns it (as last seen) and any SpecChanged condition."""
        assert want.child is not None and want.target is not None
        target = targets.TARGETS[want.target]
        informer = self.children[target.kind]
        child = informer.get(key) or self.applied.get(key)
        if child is not None and not owned_by(child, obj):
            raise_conflict(target, key)
        if child is None:
            return self._apply(key, target, want.child, obj, created=True), []
        if meta_of(child).get("deletionTimestamp"):
            return child, [mirror.condition("SpecChanged", True, "Recreating", "waiting for the old child to go")]
        if apply.spec_hash(child) != want.spec_hash:
            return child, self._spec_changed(obj, child, target, want)
        if child["metadata"].get("generation") != (self.applied.get(key) or {}).get("metadata", {}).get("generation"):
            # First sight since (re)start, someone edited the child, or Kueue admitted it: re-assert our fields.
            return self._apply(key, target, keep_admission(want.child, child), obj, created=False), []
        return child, []

    def _apply(self, key: Key, target: Target, child: dict[str, Any], obj: dict[str, Any], created: bool
               ) -> dict[str, Any]:
        result = apply.apply_object(self.rest, target, child, force=True)
        self.applied[key] = result
        if created:
            self.events.record(obj, "Normal", "Created", f"created {target.kind} {key[1]}")
        return result

    def _spec_changed(self, obj: dict[str, Any], child: dict[str, Any], target: Target, want: Desired
                      ) -> list[dict[str, Any]]:
        policy = update_policy(obj, self.settings.update_policy)
        old, new = apply.spec_hash(child), want.spec_hash
        if policy in ("recreate", "continue"):
            start = self._record_checkpoint_dir(obj, want, policy)
            kube.delete_child(self.rest, child, target.plural)
            self.applied.pop(key_of(obj), None)
            self.events.record(obj, "Normal", "Recreating", f"spec changed ({old} → {new}): deleting "
                              f"{target.kind} {child['metadata']['name']} to recreate it (update policy {policy}"
                              f"{start})")
            return [mirror.condition("SpecChanged", True, "Recreating", f"spec hash {old} → {new}; recreating"
                                     f"{start}")]
        message = (f"spec changed (spec hash {old} → {new}) but the {target.kind} keeps running the old spec: "
                   f"annotate {UPDATE_HINT} to apply it, or delete and re-apply the TrainingJob")
        return [mirror.condition("SpecChanged", True, "NotApplied", message)]

    def _spec_of(self, obj: dict[str, Any]) -> Any:
        """The TrainingJob's loaded spec (from the render cache), None when it is invalid."""
        return self.desired.get(obj, self.served, self._configmap).job

    def _record_checkpoint_dir(self, obj: dict[str, Any], want: Desired, policy: str) -> str:
        """Where the recreated child checkpoints, written to status before the old child is deleted (a
        controller that stops in between must not start the new child in the old run's directory)."""
        latest = self._latest(obj)
        current = status_of(latest).get("checkpointDir")
        target_dir = checkpoint_dir_of(want.job, current, policy, want.spec_hash)
        if target_dir is None:
            return ""
        if target_dir != current:
            meta = obj["metadata"]
            version = kube.patch_status(self.rest, meta["namespace"], meta["name"], {"checkpointDir": target_dir})
            before = self.written.get(meta["uid"]) or {k: v for k, v in status_of(obj).items() if k != "progress"}
            self.written.wrote(meta["uid"], {**before, "checkpointDir": target_dir}, version)
        verb = "continues from the checkpoints in" if policy == "continue" else "starts fresh, checkpointing to"
        return f"; the new child {verb} {target_dir}"

    def _configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A code ConfigMap, cached: its name is its content's digest, so it never changes under a name."""
        key = (namespace, name)
        if key not in self.configmaps:
            found = kube.read_configmap(self.rest, namespace, name)
            if found is None:
                return None
            if len(self.configmaps) >= CONFIGMAP_CACHE:
                self.configmaps.pop(next(iter(self.configmaps)))
            self.configmaps[key] = found
        return self.configmaps[key]

    def _latest(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The object with the status we last wrote, if the watch has not delivered it yet (progress and
        hang, which the progress reader and the hang watch write, always from the cache)."""
        written = self.written.get(obj["metadata"]["uid"])
        if written is None:  # the cache holds our last write: its object now, not the reconcile's snapshot
            current = self.jobs.get(key_of(obj))
            return current if current is not None and meta_of(current).get("uid") == obj["metadata"]["uid"] else obj
        readers = {k: v for k in READER_KEYS if (v := status_of(obj).get(k))}
        return {**obj, "status": {**written, **readers}}

    def _write_status(self, obj: dict[str, Any], previous: dict[str, Any], status: dict[str, Any]) -> None:
        old = status_of(obj)
        meta = obj["metadata"]
        mine = {k: v for k, v in status.items() if k not in READER_KEYS}
        if status in (old, previous) or mine == self.written.get(meta["uid"]):
            return
        version = kube.patch_status(self.rest, meta["namespace"], meta["name"],
                                    _with_nulls({**old, **previous}, status))
        self.written.wrote(meta["uid"], mine, version)
        for kind, reason, message in mirror.transitions(previous, status):
            self.events.record(obj, kind, reason, message)


UPDATE_HINT = "kubetrain.dev/update-policy=recreate"
READER_KEYS = ("progress", "hang", "objective")  # status fields written by the periodic readers, not by the reconcile


class ChildConflict(Exception):
    pass


def raise_conflict(target: Target, key: Key) -> None:
    raise ChildConflict(f"{target.kind} {key[0]}/{key[1]} exists and is not controlled by this TrainingJob "
                        "(submitted by the CLI?): delete it or rename the TrainingJob")


def key_of(obj: dict[str, Any]) -> Key:
    return watch.key(obj)


def _with_nulls(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch sets keys; fields the new status lacks must be sent as null to be removed."""
    return {**{k: None for k in old if k not in new}, **new}
