"""kubetrain's Python API: what the CLI does, callable from a notebook, a CI script or a controller.

    >>> import kubetrain.api as kt
    >>> job = kt.load("examples/digits/kubetrain.yaml")
    >>> [obj["kind"] for obj in kt.render(job, target="pytorchjob")]
    ['ConfigMap', 'PyTorchJob']

Every function raises the CLI's typed errors (kubetrain.errors: SpecError, UsageError, ClusterError and its
subclasses); their str() is the CLI's one-line message. Cluster functions take `namespace`, `context`,
`kubeconfig` and `request_timeout` as the CLI's flags do, or an existing `connection` (see connect()).
Messages the CLI prints to stderr go to the "kubetrain" logger. Heavy modules (the kubernetes package,
torch) are imported only by the functions that need them. See docs/api.md.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubetrain.errors import ClusterError, KubetrainError, SpecError, UsageError
from kubetrain.jobspec.load import LoadedSpec

if TYPE_CHECKING:
    from kubetrain.cluster.preflight import CheckResult
    from kubetrain.jobs.crud import JobSummary
    from kubetrain.jobs.gpu import PodGpus
    from kubetrain.jobs.stacks import JobStacks
    from kubetrain.jobs.status import JobStatus
    from kubetrain.jobs.targets import Target
    from kubetrain.kube.connection import Connection
    from kubetrain.submit import Submitted
    from kubetrain.sweeps.state import SweepState, Trial
    from kubetrain.validate import Report

__all__ = ["ClusterError", "KubetrainError", "LoadedSpec", "SpecError", "UsageError", "connect", "delete", "gpu",
           "list_jobs", "load", "logs", "render", "run", "stacks", "status", "submit", "sweep_best", "sweep_run",
           "sweep_status", "sweep_stop", "sweep_submit", "validate", "wait"]
log = logging.getLogger("kubetrain")
Spec = str | Path | LoadedSpec


def load(path: str | Path = "kubetrain.yaml") -> LoadedSpec:
    """Read, default and check a job spec ('-' is stdin); all problems at once in one SpecError."""
    from kubetrain.jobspec.load import load_spec

    return load_spec(str(path))


def _loaded(spec: Spec) -> LoadedSpec:
    return spec if isinstance(spec, LoadedSpec) else load(spec)


def render(spec: Spec, *, target: str | None = None, namespace: str | None = None, image: str | None = None,
           cloud: str | None = None) -> list[dict[str, Any]]:
    """The manifests `kubetrain render` prints: the code ConfigMap (if any), then the PyTorchJob or TrainJob."""
    from kubetrain.render.loaded import render_loaded

    return render_loaded(_loaded(spec), target=target, namespace=namespace, image=image, cloud=cloud)


def validate(objects: list[dict[str, Any]] | str | Path, *, schemas: tuple[str, ...] = (),
             connection: Connection | None = None) -> Report:
    """Check manifests (objects in memory, or a file) offline, as `kubetrain validate` does: against the
    cached and given CRDs (`schemas`: files, directories or URLs), and the cluster's CRDs with `connection`.
    Returns the Report; `report.failed()` says whether anything is invalid."""
    from kubetrain.validate import SchemaStore
    from kubetrain.validate.engine import validate_objects, validate_sources
    from kubetrain.validate.schemas import cached_crds, load_crd_source

    store = SchemaStore()
    found: list[tuple[dict[str, Any], str]] = []
    if connection is not None:
        from kubetrain.kube.crds import training_crds

        found += training_crds(connection)
    for location in schemas:
        found += load_crd_source(location)
    for crd, source in [*found, *cached_crds()]:
        store.add_crd(crd, source)
    if isinstance(objects, list):
        return validate_objects(objects, store)
    from kubetrain.jobspec.load import read_text

    return validate_sources([read_text(str(objects))], store)


def connect(context: str | None = None, kubeconfig: str | None = None,
            request_timeout: float | None = None) -> Connection:
    """A connection configured as kubectl's would be ($KUBECONFIG, ~/.kube/config, then in-cluster)."""
    from kubetrain.kube.connection import connect as connect_cluster

    return connect_cluster(context, kubeconfig, request_timeout)


@dataclass(frozen=True)
class _Where:
    connection: Connection
    namespace: str


def _where(namespace: str | None, context: str | None, kubeconfig: str | None, request_timeout: float | None,
           connection: Connection | None, default: str | None = None) -> _Where:
    conn = connection or connect(context, kubeconfig, request_timeout)
    return _Where(conn, conn.namespace(namespace, default))


class _LogReporter:
    def info(self, message: str) -> None:
        log.info(message)

    def warn(self, message: str) -> None:
        log.warning(message)

    def check(self, result: CheckResult) -> None:
        (log.info if result.status != "fail" else log.error)(result.line())


def submit(spec: Spec, *, namespace: str | None = None, context: str | None = None, kubeconfig: str | None = None,
           request_timeout: float | None = None, connection: Connection | None = None, target: str | None = None,
           image: str | None = None, dry_run: str = "none", replace: bool = False, preflight: bool = True,
           skip_fit: bool = False, wait_for_capacity: bool = False, timeout: float | None = None) -> Submitted:
    """Render, validate (with the cluster's CRD), preflight and server-side apply, as `kubetrain submit`.
    dry_run: "none", "client" (check, write nothing) or "server" (the API server validates, dryRun=All)."""
    from kubetrain.submit import SubmitOptions
    from kubetrain.submit import submit as run_submit

    loaded = _loaded(spec)
    where = _where(namespace, context, kubeconfig, request_timeout, connection, loaded.job.metadata.namespace)
    options = SubmitOptions(target, image, dry_run, replace, preflight, skip_fit, wait_for_capacity, timeout)
    return run_submit(where.connection, loaded, where.namespace, options, _LogReporter())


def find(name: str, *, namespace: str | None = None, target: str | None = None, context: str | None = None,
         kubeconfig: str | None = None, request_timeout: float | None = None,
         connection: Connection | None = None) -> tuple[Target, dict[str, Any]]:
    """The job called `name` and its kind (target None/"auto": among the installed kinds)."""
    from kubetrain.jobs.logs import find_job

    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    return find_job(where.connection.rest, where.namespace, name, target)


def status(name: str, *, namespace: str | None = None, recent: int = 10, context: str | None = None,
           kubeconfig: str | None = None, request_timeout: float | None = None,
           connection: Connection | None = None) -> JobStatus:
    """What `kubetrain status` shows: state, conditions, pods, the job's own Events and hints."""
    from kubetrain.jobs.status import job_status

    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    return job_status(where.connection.rest, None, where.namespace, name, recent)


def list_jobs(*, namespace: str | None = None, all_namespaces: bool = False, context: str | None = None,
              kubeconfig: str | None = None, request_timeout: float | None = None,
              connection: Connection | None = None) -> list[JobSummary]:
    """PyTorchJobs and TrainJobs in a namespace (or all), oldest first, as `kubetrain list`."""
    from kubetrain.jobs.crud import list_jobs as list_all

    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    return list_all(where.connection.rest, None, None if all_namespaces else where.namespace)


def logs(name: str, *, namespace: str | None = None, follow: bool = False, replica: str = "all",
         tail: int | None = None, since_seconds: int | None = None, previous: bool = False,
         timeout: float | None = None, target: str | None = None, context: str | None = None,
         kubeconfig: str | None = None, request_timeout: float | None = None,
         connection: Connection | None = None) -> Iterator[str]:
    """The job's merged log lines, each prefixed with its replica (`[worker-1] ...`). With follow, lines
    arrive as the pods write them, until the job ends (then a ClusterError if it failed)."""
    from kubetrain.jobs.logs import LogOptions, follow_job_logs, print_logs

    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    options = LogOptions(replica=replica, since_seconds=since_seconds, tail=tail, previous=previous)
    if not follow:
        lines: list[str] = []
        print_logs(where.connection, where.namespace, name, target, options, lines.append, log.info)
        yield from lines
        return
    yield from _followed(lambda sink: follow_job_logs(where.connection, where.namespace, name, target, options,
                                                      sink, log.info, timeout=timeout))


_DONE = object()


def _followed(run: Any) -> Iterator[str]:
    """Lines from a follower that calls a sink from its threads, as an iterator (bounded buffering)."""
    import queue
    import threading

    lines: queue.Queue[Any] = queue.Queue(maxsize=10_000)
    outcome: list[Any] = []

    def work() -> None:
        try:
            outcome.append(run(lines.put))
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append(exc)
        lines.put(_DONE)

    threading.Thread(target=work, name="kubetrain-logs", daemon=True).start()
    while (line := lines.get()) is not _DONE:
        yield line
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    if not outcome[0].ok:
        raise ClusterError(f"job {outcome[0].state}" + (f": {outcome[0].message}" if outcome[0].message else ""))


def gpu(name: str, *, namespace: str | None = None, replica: str = "all", target: str | None = None,
        context: str | None = None, kubeconfig: str | None = None, request_timeout: float | None = None,
        connection: Connection | None = None) -> list[PodGpus]:
    """nvidia-smi in every running pod of the job (pods/exec), as `kubetrain gpu`."""
    from kubetrain.jobs.gpu import job_gpus
    from kubetrain.jobs.pods import check_replica_filter

    wanted = check_replica_filter(replica)
    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    found, _ = find(name, namespace=where.namespace, target=target, connection=where.connection)
    return job_gpus(where.connection.rest, found, where.namespace, name, wanted)


def stacks(name: str, *, namespace: str | None = None, replica: str = "all", target: str | None = None,
           context: str | None = None, kubeconfig: str | None = None, request_timeout: float | None = None,
           connection: Connection | None = None) -> JobStacks:
    """Every rank's Python stack and the hang verdict from the running pods (pods/exec), as `kubetrain
    stacks`; `.lines()` is the report, `.assessment` the judgement (docs/hangs.md)."""
    from kubetrain.jobs.pods import check_replica_filter
    from kubetrain.jobs.stacks import job_stacks

    wanted = check_replica_filter(replica)
    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    found, _ = find(name, namespace=where.namespace, target=target, connection=where.connection)
    return job_stacks(where.connection.rest, found, where.namespace, name, wanted)


def wait(name: str, *, namespace: str | None = None, timeout: float | None = None, target: str | None = None,
         context: str | None = None, kubeconfig: str | None = None, request_timeout: float | None = None,
         connection: Connection | None = None) -> str:
    """Wait until the job ends; returns "Succeeded" or "Failed" (WaitTimeout after `timeout` seconds)."""
    from kubetrain.jobs.crud import wait_finished

    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    found, _ = find(name, namespace=where.namespace, target=target, connection=where.connection)
    return wait_finished(where.connection.rest, found, where.namespace, name, timeout, on_retry=log.info)


def delete(name: str, *, namespace: str | None = None, wait: bool = False, timeout: float | None = None,
           target: str | None = None, context: str | None = None, kubeconfig: str | None = None,
           request_timeout: float | None = None, connection: Connection | None = None) -> list[str]:
    """Delete the job (and the TrainingJob controlling it, and its code ConfigMaps), as `kubetrain delete`;
    with wait, until the job and its pods are gone. Returns what was deleted, one line each."""
    from kubetrain.jobs.removal import delete_job

    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    found, obj = find(name, namespace=where.namespace, target=target, connection=where.connection)
    return delete_job(where.connection, found, obj, where.namespace, wait, timeout)


def run(spec: Spec, *, nodes: int | None = None, procs_per_node: int | None = None, volumes: tuple[str, ...] = (),
        secrets: dict[str, str] | None = None, port: int = 29500, log_dir: Path | None = None) -> int:
    """Run the job on this machine with torchrun, as `kubetrain run`, with its hang watch (spec.hang, see
    docs/hangs.md: a hang is reported on stderr and acted on by its policy); returns its exit status."""
    from kubetrain.local import RunOptions, build_plan
    from kubetrain.local.hangwatch import supervise
    from kubetrain.local.preflight import check_program, check_refs, require_torch

    loaded = _loaded(spec)
    plan = build_plan(loaded, RunOptions(secrets or {}, list(volumes), nodes, procs_per_node, port, log_dir))
    require_torch()
    check_refs(plan)
    check_program(plan)
    return supervise(plan, loaded.job.spec.hang, sys.stdout, sys.stderr)[0]


def sweep_run(spec: Spec, *, on_change: Callable[[SweepState], None] | None = None) -> SweepState:
    """Run the spec's sweep on this machine, as `kubetrain sweep run` (each trial a `kubetrain run`,
    sweep.parallelism at a time); `on_change(state)` after every change. Returns the final state: its trials,
    their parameters, states and results (docs/sweeps.md)."""
    from kubetrain.local.preflight import require_torch
    from kubetrain.local.sweep import LocalSweep

    loaded = _loaded(spec)
    if loaded.job.sweep is None:
        raise UsageError(f"{loaded.source}: no `sweep` section (docs/sweeps.md)")
    require_torch()
    return LocalSweep(loaded, on_change or (lambda _: None), lambda line: log.info("%s", line)).run()


def sweep_best(spec: Spec) -> Trial | None:
    """The best complete trial of the spec's last local sweep (None when no trial completed)."""
    from kubetrain.local.sweep import read_state
    from kubetrain.sweeps.engine import Engine

    loaded = _loaded(spec)
    if loaded.job.sweep is None:
        raise UsageError(f"{loaded.source}: no `sweep` section (docs/sweeps.md)")
    return Engine(loaded.job.sweep).best(read_state(loaded))


def sweep_submit(spec: Spec, *, namespace: str | None = None, context: str | None = None,
                 kubeconfig: str | None = None, request_timeout: float | None = None,
                 connection: Connection | None = None, dry_run: bool = False) -> dict[str, Any]:
    """Create or update the spec's sweep as a Sweep resource (the controller runs it), as `kubetrain sweep
    submit`; returns the Sweep object the API server answered."""
    from kubetrain.jobs import sweeps

    loaded = _loaded(spec)
    if loaded.job.sweep is None:
        raise UsageError(f"{loaded.source}: no `sweep` section (docs/sweeps.md)")
    where = _where(namespace, context, kubeconfig, request_timeout, connection, loaded.job.metadata.namespace)
    return sweeps.submit(where.connection.rest, loaded.job, where.namespace, dry_run)


def sweep_status(name: str, *, namespace: str | None = None, context: str | None = None,
                 kubeconfig: str | None = None, request_timeout: float | None = None,
                 connection: Connection | None = None) -> SweepState:
    """A Sweep's search state in the cluster: every trial, its parameters, state, step and objective."""
    from kubetrain.jobs import sweeps

    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    return sweeps.read(where.connection.rest, where.namespace, name)[1]


def sweep_stop(name: str, *, namespace: str | None = None, timeout: float = 300.0, context: str | None = None,
               kubeconfig: str | None = None, request_timeout: float | None = None,
               connection: Connection | None = None) -> list[str]:
    """Stop a Sweep and delete every trial (waits until they are gone), as `kubetrain sweep stop`; returns the
    deleted trials' names."""
    from kubetrain.jobs import sweeps

    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    return sweeps.stop(where.connection.rest, where.namespace, name, timeout)
