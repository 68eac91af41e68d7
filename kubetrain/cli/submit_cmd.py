"""kubetrain submit: render → validate → preflight → apply, then optionally wait for or follow the job."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from kubetrain.cli.cluster_opts import cluster_options, connect_from
from kubetrain.cli.common import load, render_loaded, spec_file_option, warn_render
from kubetrain.cli.output import handle_errors, info, warn
from kubetrain.errors import ClusterError, Problem, SpecError, UsageError
from kubetrain.render.yamlout import dump_json, dump_yaml
from kubetrain.spec.load import LoadedSpec

if TYPE_CHECKING:
    from kubetrain.client.connection import Connection
    from kubetrain.client.preflight import CheckResult
    from kubetrain.client.targets import Target


@click.command()
@spec_file_option
@cluster_options
@click.option("--target", type=click.Choice(["pytorchjob", "trainjob", "auto"]), default=None,
              help="Override spec.target (auto: PyTorchJob if installed, else TrainJob).")
@click.option("--image", default=None, help="Override spec.image.")
@click.option("--build", "build_image", is_flag=True, help="Build and push the image first (`kubetrain build --push`) "
              "and submit with its reference.")
@click.option("--dry-run", "dry_run", type=click.Choice(["none", "client", "server"]), default="none",
              show_default=True, help="client: check and print, write nothing; server: also let the API server "
              "validate (dryRun=All).")
@click.option("--replace", is_flag=True, help="If the job exists, delete it (waiting for its pods) and recreate it.")
@click.option("--skip-preflight", is_flag=True, help="Skip every preflight check.")
@click.option("--wait-for-capacity", "wait_capacity", is_flag=True,
              help="If the job fits the cluster but not its free GPUs now, wait (up to --timeout) until it does, "
                   "then submit.")
@click.option("--skip-fit", is_flag=True, help="Skip only the GPU fit check (e.g. when an autoscaler adds nodes); "
              "the other checks still run.")
@click.option("-o", "--output", type=click.Choice(["name", "yaml", "json"]), default=None,
              help="stdout: the job's name (default), kind/name, or the applied objects.")
@click.option("--wait", is_flag=True, help="Wait for the job to finish: exit 0 on Succeeded, 1 on Failed, "
              "4 on --timeout, 3 if the API server stayed unreachable (see docs/cluster.md).")
@click.option("--follow", is_flag=True, help="After submitting, follow the logs (as `kubetrain logs -f`).")
@click.option("--controller", "via_controller", is_flag=True, help="Hand the TrainingJob to the cluster's "
              "kubetrain controller instead of applying the PyTorchJob/TrainJob (docs/operator.md).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Give up waiting (--wait, --replace) after this long (default: --wait forever, --replace 300).")
@handle_errors
def submit(filename: str, context: str | None, kubeconfig: str | None, namespace: str | None,
           request_timeout: float | None, target: str | None,
           image: str | None, build_image: bool, dry_run: str, replace: bool, skip_preflight: bool, skip_fit: bool,
           wait_capacity: bool,
           output: str | None, wait: bool, follow: bool, timeout: float | None, via_controller: bool) -> None:
    """Render, validate, preflight and apply the job to a cluster.

    Server-side apply with field manager `kubetrain`: submitting an unchanged spec again is a no-op; a changed
    spec for an existing job is refused unless --replace. The job's name goes to stdout, messages to stderr.

    \b
    Examples:
      kubetrain submit
      kubetrain submit -f job.yaml -n team-a --context prod --wait
      kubetrain submit --dry-run=server -o yaml
      kubetrain submit --replace --follow
    """
    if dry_run != "none" and (wait or follow):
        raise UsageError("--wait/--follow cannot be combined with --dry-run")
    loaded = load(filename)
    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace, loaded.job.metadata.namespace)
    if via_controller:
        from kubetrain.cli.controller_cmd import submit_to_controller

        submit_to_controller(connection, loaded, ns, dry_run, output)
        return
    chosen = _resolve_target(connection, target or loaded.job.spec.target)
    if build_image:
        image = _build(loaded)
    cloud = _resolve_cloud(connection) if loaded.job.spec.placement.cloud == "auto" else None
    objects = render_loaded(loaded, target=chosen.name, namespace=ns, image=image, cloud=cloud)
    warn_render(loaded, cloud)
    validate_rendered(connection, chosen, objects)
    if not skip_preflight and not (not replace and _unchanged(connection, chosen, objects)):
        run_preflight(connection, chosen, objects, ns, skip_fit)
        if wait_capacity and not skip_fit and dry_run == "none":
            _wait_for_capacity(connection, chosen, objects, ns, timeout)
    name = _apply(connection, chosen, objects, dry_run, replace, timeout, output)
    if follow:
        _follow(connection, chosen, ns, name, timeout)
    if wait:
        _wait(connection, chosen, ns, name, timeout)


def _resolve_target(connection: Connection, wanted: str) -> Target:
    from kubetrain.client.targets import resolve

    return resolve(connection.api, wanted)


def _resolve_cloud(connection: Connection) -> str:
    """`placement.cloud: auto`: the profile the cluster's (GPU) nodes look like, as `kubetrain doctor` shows."""
    from kubetrain.client.cloud import detect_cloud
    from kubetrain.client.doctor import list_node_dicts

    nodes = list_node_dicts(connection)
    if nodes is None:
        warn("placement.cloud auto: may not list nodes, using no cloud profile (set placement.cloud)")
        return "none"
    profile = detect_cloud(nodes) or "none"
    info(f"placement.cloud auto: this cluster looks like {profile}")
    return profile


def _build(loaded: LoadedSpec) -> str:
    from kubetrain.build import build_image

    return build_image(loaded, push=True)


def validate_rendered(connection: Connection, target: Target, objects: list[dict[str, Any]]) -> None:
    """Offline schema + semantic checks, with the cluster's own CRD when we may read it."""
    from kubetrain.validate import SchemaStore
    from kubetrain.validate.engine import validate_document
    from kubetrain.validate.schemas import cached_crds
    from kubetrain.yamlsrc import ParsedDoc

    store = SchemaStore()
    for crd, source in [*_cluster_crd(connection, target), *cached_crds()]:
        store.add_crd(crd, source)
    if store.validator(target.api_version, target.kind) is None:
        info(f"validate: no local schema for {target.kind}; the API server validates it on apply")
    issues = [issue for index, obj in enumerate(objects, 1)
              for issue in validate_document(ParsedDoc(obj), "<rendered>", index, store, True)
              if not issue.message.startswith("no schema for")]
    for issue in issues:
        if issue.severity != "error":
            warn(issue.text())
    errors = [Problem("", issue.text()) for issue in issues if issue.severity == "error"]
    if errors:
        raise SpecError(errors)


def _cluster_crd(connection: Connection, target: Target) -> list[tuple[dict[str, Any], str]]:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        crd = client.ApiextensionsV1Api(connection.api).read_custom_resource_definition(target.resource)
    except (ApiException, HTTPError, OSError):
        return []  # forbidden, not installed or unreachable: preflight (or apply) says which
    as_dict = connection.api.sanitize_for_serialization(crd)  # type: ignore[no-untyped-call]
    return [(as_dict, f"cluster {connection.context or 'in-cluster'}")]


def _unchanged(connection: Connection, target: Target, objects: list[dict[str, Any]]) -> bool:
    """Is this very spec already submitted? Then there is nothing to check: re-submitting is a no-op even
    on a full cluster (its own pods hold the GPUs the fit check would miss)."""
    from kubetrain.client import apply, jobs

    job = objects[-1]
    try:
        existing = jobs.get(connection.rest, target, job["metadata"]["namespace"], job["metadata"]["name"])
    except ClusterError:
        return False  # forbidden, no namespace, no CRD...: preflight explains it, check by check
    same = existing is not None and bool(apply.spec_hash(job)) and apply.spec_hash(existing) == apply.spec_hash(job)
    if same:
        info("preflight: skipped, the same spec is already submitted")
    return same


def run_preflight(connection: Connection, target: Target, objects: list[dict[str, Any]], namespace: str,
                  skip_fit: bool = False) -> None:
    from kubetrain.client import preflight

    results = preflight.run(connection.api, target, objects, namespace, connection.server, skip_fit)
    for result in results:
        info(_styled(result))
    failures = preflight.failed(results)
    if failures:
        fit_only = all(f.name == "fit" for f in failures)
        raise ClusterError(f"preflight failed ({len(failures)} check(s) marked ✗): fix them, "
                           f"or {'--skip-fit' if fit_only else '--skip-preflight'} to submit anyway")


def _wait_for_capacity(connection: Connection, target: Target, objects: list[dict[str, Any]], namespace: str,
                       timeout: float | None, every: float = 5.0) -> None:
    """Poll the fit check until the job fits the free GPUs (a never-fit job was refused before this)."""
    import time

    from kubetrain.client import preflight
    from kubetrain.client.watch import WaitTimeout

    job = objects[-1]
    deadline = None if timeout is None else time.monotonic() + timeout
    said = False
    while (result := preflight.check_fit(connection.api, job, target, namespace,
                                         job["metadata"]["name"])).status != preflight.OK:
        if deadline is not None and time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for GPU capacity: {result.message}")
        if not said:
            info("--wait-for-capacity: waiting until the job fits the free GPUs")
            said = True
        time.sleep(every)
    if said:
        info(f"capacity: {result.message}")


def _styled(result: CheckResult) -> str:
    line = result.line()
    if not sys.stderr.isatty():
        return line
    colour = {"ok": "green", "fail": "red", "warn": "yellow"}[result.status]
    return click.style(line[0], fg=colour) + line[1:]


def _apply(connection: Connection, target: Target, objects: list[dict[str, Any]], dry_run: str, replace: bool,
           timeout: float | None, output: str | None) -> str:
    from kubetrain.client import apply

    job = objects[-1]
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    if replace and dry_run == "none":
        info(f"replacing {target.kind} {namespace}/{name} if it exists (deleting it and its pods first)")
    result = apply.submit(connection.api, target, objects, dry_run=None if dry_run == "none" else dry_run,
                          replace=replace, timeout=300 if timeout is None else timeout)
    info(result.message(target, name, namespace))
    if output == "yaml":
        click.echo(dump_yaml(result.objects), nl=False)
    elif output == "json":
        click.echo(dump_json(result.objects), nl=False)
    else:
        click.echo(f"{target.kind.lower()}.{target.group}/{name}" if output == "name" else name)
    return str(name)


def _wait(connection: Connection, target: Target, namespace: str, name: str, timeout: float | None) -> None:
    from kubetrain.client import jobs

    info(f"waiting for {target.kind} {namespace}/{name} to finish")
    final = jobs.wait_finished(connection.rest, target, namespace, name, timeout, on_retry=info)
    info(f"{target.kind} {namespace}/{name} {final}")
    if final != "Succeeded":
        sys.exit(1)


def _follow(connection: Connection, target: Target, namespace: str, name: str, timeout: float | None) -> None:
    """`kubetrain logs -f` (merged logs, live progress line from the metrics); exit 1 if the job fails."""
    from kubetrain.cli.logs_cmd import follow_renderer, use_color
    from kubetrain.client import logs

    renderer = follow_renderer()
    options = logs.LogOptions(color=use_color("auto", sys.stdout))
    try:
        result = logs.follow_job_logs(connection, namespace, name, target, options, renderer.line, renderer.notice,
                                      timeout=timeout)
    finally:
        renderer.close()
    info(f"{target.kind} {namespace}/{name} {result.state}" + (f": {result.message}" if result.message else ""))
    if not result.ok:
        sys.exit(1)
