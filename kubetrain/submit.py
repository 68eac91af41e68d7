"""The submit pipeline: target → render → validate (with the cluster's CRD) → preflight → apply.

One implementation, used by `kubetrain submit` and the Python API (kubetrain.api.submit). Messages go to a
Reporter (the CLI prints them to stderr, the API logs them); failures are typed KubetrainErrors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kubetrain import jobs
from kubetrain.checks import OK, Check, failed
from kubetrain.cluster import preflight
from kubetrain.cluster.cloud import detect_cloud
from kubetrain.cluster.doctor import list_node_dicts
from kubetrain.errors import ClusterError, Problem, SpecError
from kubetrain.jobs import apply
from kubetrain.jobs.targets import resolve
from kubetrain.kube.crds import crd_if_readable
from kubetrain.kube.errors import ApiError, NotFound
from kubetrain.kube.watch import WaitTimeout
from kubetrain.render import RenderOptions, render_warnings
from kubetrain.render.loaded import render_loaded
from kubetrain.validate.engine import validate_document
from kubetrain.validate.schemas import schema_store
from kubetrain.yamlsrc import ParsedDoc

if TYPE_CHECKING:
    from kubetrain.jobs.apply import ApplyResult
    from kubetrain.jobs.targets import Target
    from kubetrain.jobspec.load import LoadedSpec
    from kubetrain.jobspec.model import JobSpec
    from kubetrain.kube.connection import Connection

DRY_RUNS = ("none", "client", "server")


class Reporter(Protocol):
    def info(self, message: str) -> None: ...
    def warn(self, message: str) -> None: ...
    def check(self, result: Check) -> None: ...


@dataclass(frozen=True)
class SubmitOptions:
    target: str | None = None  # pytorchjob | trainjob | auto; None: the spec's
    image: str | None = None
    dry_run: str = "none"  # none | client | server
    replace: bool = False
    preflight: bool = True
    skip_fit: bool = False
    wait_for_capacity: bool = False
    timeout: float | None = None  # for --wait-for-capacity and --replace (300 s by default)
    skip: frozenset[str] = frozenset()  # preflight checks not run (preflight.SKIPPABLE); skip_fit adds "fit"

    @property
    def skipped(self) -> frozenset[str]:
        return self.skip | ({"fit"} if self.skip_fit else set())


@dataclass
class Submitted:
    """What was applied (or would be, for a dry run)."""

    target: Target
    namespace: str
    name: str
    result: ApplyResult
    checks: list[Check] = field(default_factory=list)

    @property
    def objects(self) -> list[dict[str, Any]]:
        return self.result.objects

    @property
    def action(self) -> str:
        return self.result.action


def submit(connection: Connection, loaded: LoadedSpec, namespace: str, options: SubmitOptions,
           report: Reporter) -> Submitted:
    if options.dry_run not in DRY_RUNS:
        raise ValueError(f"dry_run must be one of {DRY_RUNS}, not {options.dry_run!r}")
    target = resolve(connection.rest, options.target or loaded.job.spec.target)
    cloud = resolve_cloud(connection, report) if loaded.job.spec.placement.cloud == "auto" else None
    gpu_via = resolve_gpu_via(connection, loaded.job.spec, report) if loaded.job.spec.gpu_via == "auto" else None
    objects = render_loaded(loaded, target=target.name, namespace=namespace, image=options.image, cloud=cloud,
                            gpu_via=gpu_via, cluster=connection.cluster)
    for message in render_warnings(loaded.job, RenderOptions(cloud=cloud, gpu_via=gpu_via)):
        report.warn(message)
    validate_rendered(connection, target, objects, report)
    checks: list[Check] = []
    if options.preflight and (options.replace or not unchanged(connection, target, objects, report)):
        checks = run_preflight(connection, target, objects, namespace, options.skipped, report)
        if options.wait_for_capacity and "fit" not in options.skipped and options.dry_run == "none":
            wait_for_capacity(connection, target, objects, namespace, options.timeout, report)
    result = apply_objects(connection, target, objects, options, report)
    return Submitted(target, namespace, str(objects[-1]["metadata"]["name"]), result, checks)


def resolve_cloud(connection: Connection, report: Reporter) -> str:
    """`placement.cloud: auto`: the profile the cluster's (GPU) nodes look like, as `kubetrain doctor` shows."""
    nodes = list_node_dicts(connection)
    if nodes is None:
        report.warn("placement.cloud auto: may not list nodes, using no cloud profile (set placement.cloud)")
        return "none"
    profile = detect_cloud(nodes) or "none"
    report.info(f"placement.cloud auto: this cluster looks like {profile}")
    return profile


def resolve_gpu_via(connection: Connection, spec: JobSpec, report: Reporter) -> str:
    """`gpus.via: auto`: dra when the cluster has the DeviceClass (so a DRA driver is installed), else plugin."""
    device_class = spec.gpus.deviceClass if spec.gpus else ""
    try:
        connection.rest.get(f"/apis/resource.k8s.io/v1/deviceclasses/{device_class}")
        via = "dra"
    except NotFound:
        via = "plugin"
    except ApiError as exc:
        report.warn(f"gpus.via auto: cannot read DeviceClass {device_class} ({exc.status}), using the device plugin")
        return "plugin"
    found = "has" if via == "dra" else "has no"
    report.info(f"gpus.via auto: the cluster {found} DeviceClass {device_class}: GPUs through "
                f"{'DRA' if via == 'dra' else 'the device plugin'}")
    return via


def validate_rendered(connection: Connection, target: Target, objects: list[dict[str, Any]],
                      report: Reporter) -> None:
    """Offline schema + semantic checks, with the cluster's own CRD when we may read it."""
    store = schema_store(lambda: crd_if_readable(connection, target.resource))
    if store.validator(target.api_version, target.kind) is None:
        report.info(f"validate: no local schema for {target.kind}; the API server validates it on apply")
    issues = [issue for index, obj in enumerate(objects, 1)
              for issue in validate_document(ParsedDoc(obj), "<rendered>", index, store, True)
              if not issue.message.startswith("no schema for")]
    for issue in issues:
        if issue.severity != "error":
            report.warn(issue.text())
    errors = [Problem("", issue.text()) for issue in issues if issue.severity == "error"]
    if errors:
        raise SpecError(errors)


def unchanged(connection: Connection, target: Target, objects: list[dict[str, Any]], report: Reporter) -> bool:
    """Is this very spec already submitted? Then there is nothing to check: re-submitting is a no-op even
    on a full cluster (its own pods hold the GPUs the fit check would miss)."""
    job = objects[-1]
    try:
        existing = jobs.get(connection.rest, target, job["metadata"]["namespace"], job["metadata"]["name"])
    except ClusterError:
        return False  # forbidden, no namespace, no CRD...: preflight explains it, check by check
    same = existing is not None and bool(apply.spec_hash(job)) and apply.spec_hash(existing) == apply.spec_hash(job)
    if same:
        report.info("preflight: skipped, the same spec is already submitted")
    return same


def run_preflight(connection: Connection, target: Target, objects: list[dict[str, Any]], namespace: str,
                  skip: frozenset[str], report: Reporter) -> list[Check]:
    results = preflight.run(connection.rest, target, objects, namespace, connection.server, skip)
    for result in results:
        report.check(result)
    failures = failed(results)
    if failures:
        names = sorted({f.name.lower() for f in failures})
        option = f"--skip-preflight={','.join(names)}" if set(names) <= set(preflight.SKIPPABLE) else \
            "--skip-preflight"
        raise ClusterError(f"preflight failed ({len(failures)} check(s) marked ✗): fix them, "
                           f"or {option} to submit anyway")
    return results


def wait_for_capacity(connection: Connection, target: Target, objects: list[dict[str, Any]], namespace: str,
                      timeout: float | None, report: Reporter, every: float = 5.0) -> None:
    """Poll the fit check until the job fits the free GPUs (a never-fit job was refused before this)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    said = False
    while (result := preflight.fit_check(connection.rest, target, objects, namespace)).status != OK:
        if deadline is not None and time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for GPU capacity: {result.message}")
        if not said:
            report.info("--wait-for-capacity: waiting until the job fits the free GPUs")
            said = True
        time.sleep(every)
    if said:
        report.info(f"capacity: {result.message}")


def apply_objects(connection: Connection, target: Target, objects: list[dict[str, Any]], options: SubmitOptions,
                  report: Reporter) -> ApplyResult:
    job = objects[-1]
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    if options.replace and options.dry_run == "none":
        report.info(f"replacing {target.kind} {namespace}/{name} if it exists (deleting it and its pods first)")
    result = apply.submit(connection.rest, target, objects,
                          dry_run=None if options.dry_run == "none" else options.dry_run, replace=options.replace,
                          timeout=300 if options.timeout is None else options.timeout)
    report.info(result.message(target, name, namespace))
    return result
