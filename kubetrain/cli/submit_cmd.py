"""kubetrain submit: render → validate → preflight → apply, then optionally wait for or follow the job."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from kubetrain.cli.cluster_opts import cluster_options, connect_from
from kubetrain.cli.common import load, render_loaded, spec_file_option
from kubetrain.cli.output import emit_objects, handle_errors, info, warn
from kubetrain.errors import UsageError
from kubetrain.render.yamlout import dump_json, dump_yaml
from kubetrain.spec.load import LoadedSpec

if TYPE_CHECKING:
    from kubetrain.client.connection import Connection
    from kubetrain.client.preflight import CheckResult
    from kubetrain.client.submit import Submitted
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
        submit_to_controller(connection, loaded, ns, dry_run, output)
        return
    from kubetrain.client.submit import SubmitOptions
    from kubetrain.client.submit import submit as run_submit

    if build_image:
        image = _build(loaded)
    options = SubmitOptions(target, image, dry_run, replace, not skip_preflight, skip_fit, wait_capacity, timeout)
    submitted = run_submit(connection, loaded, ns, options, _CliReporter())
    _print_result(submitted, output)
    if follow:
        _follow(connection, submitted.target, ns, submitted.name, timeout)
    if wait:
        _wait(connection, submitted.target, ns, submitted.name, timeout)


class _CliReporter:
    """Pipeline messages on stderr; preflight check marks coloured on a terminal."""

    def info(self, message: str) -> None:
        info(message)

    def warn(self, message: str) -> None:
        warn(message)

    def check(self, result: CheckResult) -> None:
        info(_styled(result))


def _print_result(submitted: Submitted, output: str | None) -> None:
    if output == "yaml":
        click.echo(dump_yaml(submitted.objects), nl=False)
    elif output == "json":
        click.echo(dump_json(submitted.objects), nl=False)
    elif output == "name":
        click.echo(f"{submitted.target.kind.lower()}.{submitted.target.group}/{submitted.name}")
    else:
        click.echo(submitted.name)


def _build(loaded: LoadedSpec) -> str:
    from kubetrain.imagebuild import build_image

    return build_image(loaded, push=True)


def _styled(result: CheckResult) -> str:
    line = result.line()
    if not sys.stderr.isatty():
        return line
    colour = {"ok": "green", "fail": "red", "warn": "yellow"}[result.status]
    return click.style(line[0], fg=colour) + line[1:]


def _wait(connection: Connection, target: Target, namespace: str, name: str, timeout: float | None) -> None:
    from kubetrain.client import jobs

    info(f"waiting for {target.kind} {namespace}/{name} to finish")
    final = jobs.wait_finished(connection.rest, target, namespace, name, timeout, on_retry=info)
    info(f"{target.kind} {namespace}/{name} {final}")
    if final != "Succeeded":
        sys.exit(1)


def _follow(connection: Connection, target: Target, namespace: str, name: str, timeout: float | None) -> None:
    """`kubetrain logs -f` (merged logs, live progress line from the metrics); exit 1 if the job fails."""
    from kubetrain.cli.common import follow_renderer, use_color
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


def submit_to_controller(connection: Connection, loaded: LoadedSpec, namespace: str, dry_run: str,
                         output: str | None) -> None:
    """`kubetrain submit --controller`: apply the TrainingJob; the controller does the rest."""
    from kubetrain.controller.handoff import hand_over, training_job

    rendered = render_loaded(loaded, namespace=namespace) if loaded.job.spec.code else []
    body = training_job(loaded, namespace, rendered)
    applied = hand_over(connection.rest, body, rendered[:-1], None if dry_run == "none" else dry_run)
    name = applied["metadata"]["name"]
    suffix = f" ({dry_run} dry run)" if dry_run != "none" else ""
    info(f"TrainingJob {namespace}/{name} handed to the controller{suffix}; follow it with "
         f"`kubectl get tj {name} -n {namespace} -w` or `kubetrain status {name}`")
    if output in ("yaml", "json"):
        emit_objects([applied], [], output)
    else:
        click.echo(f"trainingjob.kubetrain.dev/{name}" if output == "name" else name)
