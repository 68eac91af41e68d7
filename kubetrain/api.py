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
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubetrain.errors import ClusterError, KubetrainError, SpecError, UsageError
from kubetrain.jobs.crud import find_job, wait_finished
from kubetrain.jobs.crud import list_jobs as list_all
from kubetrain.jobs.gpu import job_gpus
from kubetrain.jobs.logs import LogOptions, follow_job_logs, print_logs
from kubetrain.jobs.podcheck import cluster_pod_issues
from kubetrain.jobs.pods import check_replica_filter
from kubetrain.jobs.removal import delete_job
from kubetrain.jobs.stacks import job_stacks
from kubetrain.jobs.status import job_status
from kubetrain.jobspec.load import LoadedSpec, load_spec, read_text
from kubetrain.kube.connection import connect as connect_cluster
from kubetrain.kube.crds import training_crds
from kubetrain.local import RunOptions
from kubetrain.local.hangwatch import supervise
from kubetrain.local.preflight import require_torch
from kubetrain.local.prepare import prepare_run
from kubetrain.render.loaded import render_loaded
from kubetrain.render.yamlout import dump_yaml
from kubetrain.submit import SubmitOptions
from kubetrain.submit import submit as run_submit
from kubetrain.validate.engine import validate_objects, validate_sources
from kubetrain.validate.schemas import schema_store

if TYPE_CHECKING:
    from kubetrain.checks import Check
    from kubetrain.controller.handoff import HandedOver
    from kubetrain.jobs.crud import JobSummary
    from kubetrain.jobs.gpu import PodGpus
    from kubetrain.jobs.stacks import JobStacks
    from kubetrain.jobs.status import JobStatus
    from kubetrain.jobs.targets import Target
    from kubetrain.jobspec.model import TrainingJob
    from kubetrain.kube.connection import Connection
    from kubetrain.submit import Submitted
    from kubetrain.sweeps.state import SweepState, Trial
    from kubetrain.validate import Report

__all__ = ["ClusterError", "KubetrainError", "LoadedSpec", "SpecError", "UsageError", "connect", "delete", "gpu",
           "list_jobs", "load", "logs", "render", "run", "stacks", "status", "submit", "submit_to_controller",
           "sweep_best", "sweep_promote", "sweep_run", "sweep_status", "sweep_stop", "sweep_submit", "validate", "wait"]
log = logging.getLogger("kubetrain")
Spec = str | Path | LoadedSpec


def load(path: str | Path = "kubetrain.yaml") -> LoadedSpec:
    """Read, default and check a job spec ('-' is stdin); all problems at once in one SpecError."""
    return load_spec(str(path))


def _loaded(spec: Spec) -> LoadedSpec:
    return spec if isinstance(spec, LoadedSpec) else load(spec)


def render(spec: Spec, *, target: str | None = None, namespace: str | None = None, image: str | None = None,
           cloud: str | None = None) -> list[dict[str, Any]]:
    """The manifests `kubetrain render` prints: the code ConfigMap (if any), then the PyTorchJob or TrainJob."""
    return render_loaded(_loaded(spec), target=target, namespace=namespace, image=image, cloud=cloud)


def validate(objects: list[dict[str, Any]] | str | Path, *, schemas: tuple[str, ...] = (),
             connection: Connection | None = None) -> Report:
    """Check manifests (objects in memory, or a file) as `kubetrain validate` does: against the cached and given
    CRDs (`schemas`: files, directories or URLs). With `connection`, as `validate --from-cluster`: the cluster's
    CRDs first, and each pod template dry-run created as a Pod there. Returns the Report; `report.failed()`
    says whether anything is invalid."""
    store = schema_store((lambda: training_crds(connection)) if connection is not None else None, schemas)
    if isinstance(objects, list):
        report = validate_objects(objects, store)
        sources = [("<rendered>", dump_yaml(objects))] if connection is not None else []
    else:
        sources = [read_text(str(objects))]
        report = validate_sources(sources, store)
    if connection is not None:
        report.issues += cluster_pod_issues(connection, sources)
    return report


def connect(context: str | None = None, kubeconfig: str | None = None,
            request_timeout: float | None = None) -> Connection:
    """A connection configured as kubectl's would be ($KUBECONFIG, ~/.kube/config, then in-cluster)."""
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

    def check(self, result: Check) -> None:
        (log.info if result.status != "fail" else log.error)(result.line())


def submit(spec: Spec, *, namespace: str | None = None, context: str | None = None, kubeconfig: str | None = None,
           request_timeout: float | None = None, connection: Connection | None = None, target: str | None = None,
           image: str | None = None, dry_run: str = "none", replace: bool = False, preflight: bool = True,
           skip_fit: bool = False, wait_for_capacity: bool = False, timeout: float | None = None) -> Submitted:
    """Render, validate (with the cluster's CRD), preflight and server-side apply, as `kubetrain submit`.
    dry_run: "none", "client" (check, write nothing) or "server" (the API server validates, dryRun=All)."""
    loaded = _loaded(spec)
    where = _where(namespace, context, kubeconfig, request_timeout, connection, loaded.job.metadata.namespace)
    options = SubmitOptions(target, image, dry_run, replace, preflight, skip_fit, wait_for_capacity, timeout)
    return run_submit(where.connection, loaded, where.namespace, options, _LogReporter())


def submit_to_controller(spec: Spec, *, namespace: str | None = None, context: str | None = None,
                         kubeconfig: str | None = None, request_timeout: float | None = None,
                         connection: Connection | None = None, target: str | None = None, image: str | None = None,
                         dry_run: str = "none") -> HandedOver:
    """Hand the TrainingJob to the cluster's kubetrain controller, as `kubetrain submit --controller`: the
    spec is rendered here as the controller will render it (a bad image or target is refused here), its code
    ConfigMap uploaded, and the controller creates and watches the PyTorchJob or TrainJob (docs/operator.md).
    Follow it with status(name) and logs(name); dry_run: "none", "client" or "server"."""
    from kubetrain.controller.handoff import submit_training_job  # the controller's modules: only for a hand-off

    loaded = _loaded(spec)
    if dry_run not in ("none", "client", "server"):
        raise UsageError(f"dry_run must be none, client or server, not {dry_run!r}")
    where = _where(namespace, context, kubeconfig, request_timeout, connection, loaded.job.metadata.namespace)
    overrides = {key: value for key, value in (("image", image), ("target", target)) if value}
    handed = submit_training_job(where.connection, loaded, where.namespace, dry_run, overrides)
    log.info("TrainingJob %s/%s handed to the controller", handed.namespace, handed.name)
    return handed


def find(name: str, *, namespace: str | None = None, target: str | None = None, context: str | None = None,
         kubeconfig: str | None = None, request_timeout: float | None = None,
         connection: Connection | None = None) -> tuple[Target, dict[str, Any]]:
    """The job called `name` and its kind (target None/"auto": among the installed kinds)."""
    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    return find_job(where.connection.rest, where.namespace, name, target)


def status(name: str, *, namespace: str | None = None, recent: int = 10, context: str | None = None,
           kubeconfig: str | None = None, request_timeout: float | None = None,
           connection: Connection | None = None) -> JobStatus:
    """What `kubetrain status` shows: state, conditions, pods, the job's own Events and hints."""
    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    return job_status(where.connection.rest, None, where.namespace, name, recent)


def list_jobs(*, namespace: str | None = None, all_namespaces: bool = False, context: str | None = None,
              kubeconfig: str | None = None, request_timeout: float | None = None,
              connection: Connection | None = None) -> list[JobSummary]:
    """PyTorchJobs and TrainJobs in a namespace (or all), oldest first, as `kubetrain list`."""
    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    return list_all(where.connection.rest, None, None if all_namespaces else where.namespace)


def logs(name: str, *, namespace: str | None = None, follow: bool = False, replica: str = "all",
         tail: int | None = None, since_seconds: int | None = None, previous: bool = False,
         timeout: float | None = None, target: str | None = None, context: str | None = None,
         kubeconfig: str | None = None, request_timeout: float | None = None,
         connection: Connection | None = None) -> Iterator[str]:
    """The job's merged log lines, each prefixed with its replica (`[worker-1] ...`). With follow, lines
    arrive as the pods write them, until the job ends (then a ClusterError if it failed)."""
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
    wanted = check_replica_filter(replica)
    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    found, _ = find(name, namespace=where.namespace, target=target, connection=where.connection)
    return job_gpus(where.connection.rest, found, where.namespace, name, wanted)


def stacks(name: str, *, namespace: str | None = None, replica: str = "all", target: str | None = None,
           context: str | None = None, kubeconfig: str | None = None, request_timeout: float | None = None,
           connection: Connection | None = None) -> JobStacks:
    """Every rank's Python stack and the hang verdict from the running pods (pods/exec), as `kubetrain
    stacks`; `.lines()` is the report, `.assessment` the judgement (docs/hangs.md)."""
    wanted = check_replica_filter(replica)
    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    found, _ = find(name, namespace=where.namespace, target=target, connection=where.connection)
    return job_stacks(where.connection.rest, found, where.namespace, name, wanted)


def wait(name: str, *, namespace: str | None = None, timeout: float | None = None, target: str | None = None,
         context: str | None = None, kubeconfig: str | None = None, request_timeout: float | None = None,
         connection: Connection | None = None) -> str:
    """Wait until the job ends; returns "Succeeded" or "Failed" (WaitTimeout after `timeout` seconds)."""
    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    found, _ = find(name, namespace=where.namespace, target=target, connection=where.connection)
    return wait_finished(where.connection.rest, found, where.namespace, name, timeout, on_retry=log.info)


def delete(name: str, *, namespace: str | None = None, wait: bool = False, timeout: float | None = None,
           target: str | None = None, context: str | None = None, kubeconfig: str | None = None,
           request_timeout: float | None = None, connection: Connection | None = None) -> list[str]:
    """Delete the job (and the TrainingJob controlling it, and its code ConfigMaps), as `kubetrain delete`;
    with wait, until the job and its pods are gone. Returns what was deleted, one line each."""
    where = _where(namespace, context, kubeconfig, request_timeout, connection)
    found, obj = find(name, namespace=where.namespace, target=target, connection=where.connection)
    return delete_job(where.connection, found, obj, where.namespace, wait, timeout)


def run(spec: Spec, *, nodes: int | None = None, procs_per_node: int | None = None, volumes: tuple[str, ...] = (),
        secrets: dict[str, str] | None = None, port: int = 0, log_dir: Path | None = None) -> int:
    """Run the job on this machine with torchrun, as `kubetrain run`, with its hang watch (spec.hang, see
    docs/hangs.md: a hang is reported on stderr and acted on by its policy); returns its exit status. The
    same checks as `kubetrain run` come first (kubetrain.local.prepare): its warnings go to the "kubetrain"
    logger, its refusals are raised."""
    loaded = _loaded(spec)
    options = RunOptions(secrets or {}, list(volumes), nodes, procs_per_node, port, log_dir)
    plan = prepare_run(loaded, options, log.warning)
    return supervise(plan, loaded.job.spec.hang, sys.stdout, sys.stderr)[0]


def sweep_run(spec: Spec, *, on_change: Callable[[SweepState], None] | None = None) -> SweepState:
    """Run the spec's sweep on this machine, as `kubetrain sweep run` (each trial a `kubetrain run`,
    sweep.parallelism at a time); `on_change(state)` after every change. Returns the final state: its trials,
    their parameters, states and results (docs/sweeps.md)."""
    from kubetrain.local.sweep import LocalSweep  # Optuna (the `sweeps` extra) loads only for a sweep

    loaded = _loaded(spec)
    if loaded.job.sweep is None:
        raise UsageError(f"{loaded.source}: no `sweep` section (docs/sweeps.md)")
    require_torch()
    return LocalSweep(loaded, on_change or (lambda _: None), lambda line: log.info("%s", line)).run()


def sweep_best(spec: Spec | None = None, *, name: str | None = None, namespace: str | None = None,
               context: str | None = None, kubeconfig: str | None = None, request_timeout: float | None = None,
               connection: Connection | None = None) -> Trial | None:
    """The best complete trial of the Sweep `name` in the cluster, or of the spec's last local sweep (None when
    no trial completed)."""
    from kubetrain.sweeps.engine import Engine  # Optuna (the `sweeps` extra) loads only for a sweep

    job, state, _ = _sweep_results(spec, name, namespace, context, kubeconfig, request_timeout, connection)
    assert job.sweep is not None
    return Engine(job.sweep).best(state)


def sweep_promote(spec: Spec | None = None, *, name: str | None = None, out: str | Path | None = None,
                  force: bool = False, namespace: str | None = None, context: str | None = None,
                  kubeconfig: str | None = None, request_timeout: float | None = None,
                  connection: Connection | None = None) -> str:
    """The best trial of the Sweep `name` in the cluster, or of the spec's last local sweep, as a plain
    kubetrain.yaml (its text), as `kubetrain sweep best --promote`; written to `out` too when given (an
    existing file only with force). Raises NoTrialComplete (a UsageError) when no trial has completed yet."""
    from kubetrain.sweeps.promote import best_trial, promoted_yaml, write_promoted

    job, state, origin = _sweep_results(spec, name, namespace, context, kubeconfig, request_timeout, connection)
    text = promoted_yaml(job, origin, best_trial(job, state, origin))
    if out is not None:
        write_promoted(Path(out), text, force)
    return text


def _sweep_results(spec: Spec | None, name: str | None, namespace: str | None, context: str | None,
                   kubeconfig: str | None, request_timeout: float | None, connection: Connection | None
                   ) -> tuple[TrainingJob, SweepState, str]:
    """A sweep's job, state and origin: the cluster's Sweep `name`, else the spec's last local sweep."""
    if (spec is None) == (name is None):
        raise UsageError("give a spec (a local sweep) or a Sweep's name (in the cluster), not both or neither")
    if name is not None:
        from kubetrain.jobs import sweeps

        where = _where(namespace, context, kubeconfig, request_timeout, connection)
        job, state, _ = sweeps.read(where.connection.rest, where.namespace, name)
        return job, state, f"Sweep {where.namespace}/{name}"
    from kubetrain.local.sweep import read_state  # Optuna (the `sweeps` extra) loads only for a sweep

    assert spec is not None
    loaded = _loaded(spec)
    if loaded.job.sweep is None:
        raise UsageError(f"{loaded.source}: no `sweep` section (docs/sweeps.md)")
    return loaded.job, read_state(loaded), Path(loaded.source).name


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
