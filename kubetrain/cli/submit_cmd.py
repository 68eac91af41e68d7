"""kubetrain submit: render → validate → preflight → apply, then optionally wait for or follow the job."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from kubetrain import jobs
from kubetrain.checks import Check, check_lines
from kubetrain.cli.cluster_opts import cluster_options, connect_from
from kubetrain.cli.common import load, spec_file_option
from kubetrain.cli.joblogs import follow_renderer, use_color
from kubetrain.cli.output import emit_objects, handle_errors, info, warn
from kubetrain.cluster.preflight import SKIPPABLE
from kubetrain.controller.handoff import diverged_of, outcome, submit_training_job, wait_trainingjob
from kubetrain.errors import UsageError
from kubetrain.imagebuild import build_image
from kubetrain.jobs import logs
from kubetrain.jobspec.load import LoadedSpec
from kubetrain.metrics import EXIT_DIVERGED
from kubetrain.render.yamlout import dump_json, dump_yaml
from kubetrain.submit import SubmitOptions
from kubetrain.submit import submit as run_submit

if TYPE_CHECKING:
    from kubetrain.jobs.targets import Target
    from kubetrain.kube.connection import Connection
    from kubetrain.submit import Submitted


@click.command()
@spec_file_option
@cluster_options
@click.option("--target", type=click.Choice(["pytorchjob", "trainjob", "auto"]), default=None,
              help="Override spec.target (auto: PyTorchJob if installed, else TrainJob).")
@click.option("--image", default=None, help="Override spec.image.")
@click.option("--build", "build_image", is_flag=True, help="Build and push the image first (`kubetrain build --push`) "
              "and submit with its reference.")
@click.option("--dry-run", "dry_run", type=click.Choice(["none", "client", "server"]), default="none",
              is_flag=False, flag_value="client", show_default=True,
              help="client (also a bare --dry-run, as in kubectl): check and print, write nothing; server: also "
              "let the API server validate (dryRun=All).")
@click.option("--replace", is_flag=True, help="If the job exists, delete it (waiting for its pods) and recreate it.")
@click.option("--skip-preflight", "skip_preflight", is_flag=False, flag_value="all", multiple=True, metavar="[CHECK]",
              help="Skip every preflight check, or with =CHECK only that one (repeatable, or a comma list): "
              "permissions, crd, operator, namespace, references, pod-templates, fit, queue.")
@click.option("--wait-for-capacity", "wait_capacity", is_flag=True,
              help="If the job fits the cluster but not its free GPUs now, wait (up to --timeout) until it does, "
                   "then submit.")
@click.option("--skip-fit", is_flag=True, help="Skip only the GPU fit check (e.g. when an autoscaler adds nodes); "
              "the other checks still run.")
@click.option("-o", "--output", type=click.Choice(["name", "yaml", "json"]), default=None,
              help="stdout: the job's name (default), kind/name, or the applied objects.")
@click.option("--wait", is_flag=True, help="Wait for the job to finish: exit 0 on Succeeded, 1 on Failed, "
              "4 on --timeout, 3 if the API server stayed unreachable (see docs/cluster.md); with --controller, "
              "65 if the loss diverged.")
@click.option("--follow", is_flag=True, help="After submitting, follow the logs (as `kubetrain logs -f`).")
@click.option("--controller", "via_controller", is_flag=True, help="Hand the TrainingJob to the cluster's "
              "kubetrain controller instead of applying the PyTorchJob/TrainJob (docs/operator.md).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Give up waiting (--wait, --replace) after this long (default: --wait forever, --replace 300).")
@handle_errors
def submit(filename: str, context: str | None, kubeconfig: str | None, namespace: str | None,
           request_timeout: float | None, target: str | None,
           image: str | None, build_image: bool, dry_run: str, replace: bool, skip_preflight: tuple[str, ...],
           skip_fit: bool,
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
        _via_controller(connection, loaded, ns, dry_run, output, target=target, image=image, build=build_image,
                        replace=replace, wait_capacity=wait_capacity, wait=wait, follow=follow, timeout=timeout)
        return
    if build_image:
        image = _build(loaded)
    skipped = _skipped_checks(skip_preflight)
    options = SubmitOptions(target, image, dry_run, replace, "all" not in skipped, skip_fit, wait_capacity, timeout,
                            skipped - {"all"})
    submitted = run_submit(connection, loaded, ns, options, _CliReporter())
    _print_result(submitted, output)
    if follow:
        _follow(connection, submitted.target, ns, submitted.name, timeout)
    if wait:
        _wait(connection, submitted.target, ns, submitted.name, timeout)


def _via_controller(connection: Connection, loaded: LoadedSpec, namespace: str, dry_run: str, output: str | None,
                    *, target: str | None, image: str | None, build: bool, replace: bool, wait_capacity: bool,
                    wait: bool, follow: bool, timeout: float | None) -> None:
    """`submit --controller`: the same flags, applied to the TrainingJob; --wait/--follow follow it (and its
    child) to the end with the exit codes of a direct submit. The preflight and capacity checks are the
    controller's to make, and it applies spec changes by its update policy: those flags are refused."""
    for flag, given in (("--replace", replace), ("--wait-for-capacity", wait_capacity)):
        if given:
            raise UsageError(f"{flag} cannot be combined with --controller: the controller applies a changed spec "
                             "by its update policy (docs/operator.md) and starts the child itself")
    if build:
        image = _build(loaded)
    overrides = {key: value for key, value in (("image", image), ("target", target)) if value}
    name = submit_to_controller(connection, loaded, namespace, dry_run, output, overrides)
    if not (wait or follow):
        return

    deadline = None if timeout is None else time.monotonic() + timeout
    if follow:
        handed = wait_trainingjob(connection.rest, namespace, name, timeout, "child", on_retry=info)
        child = (handed.get("status") or {}).get("target")
        if child and outcome(handed)[0] != "Invalid":
            # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
            from kubetrain.jobs.targets import TARGETS

            _follow(connection, TARGETS[child], namespace, name, _left(deadline), exit_on_failure=False)
    else:
        info(f"waiting for TrainingJob {namespace}/{name} to finish")
    final = wait_trainingjob(connection.rest, namespace, name, _left(deadline), "final", on_retry=info)
    phase, why = outcome(final)
    diverged = diverged_of(final)  # a script under policy continue may end Succeeded and still have diverged
    why = diverged or why
    told = why and (diverged or phase != "Succeeded")
    info(f"TrainingJob {namespace}/{name} {phase}" + (f": {why}" if told else ""))
    if diverged:
        sys.exit(EXIT_DIVERGED)
    if phase != "Succeeded":
        sys.exit(1)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.001, deadline - time.monotonic())


def _skipped_checks(values: tuple[str, ...]) -> frozenset[str]:
    """--skip-preflight (all), --skip-preflight=queue, --skip-preflight=fit,queue, repeated: the names."""
    names = frozenset(n.strip().lower() for value in values for n in value.split(",") if n.strip())
    unknown = sorted(names - {*SKIPPABLE, "all"})
    if unknown:
        raise UsageError(f"--skip-preflight: unknown check {', '.join(unknown)} (one of: all, {', '.join(SKIPPABLE)})")
    return names


class _CliReporter:
    """Pipeline messages on stderr; preflight check marks coloured on a terminal."""

    def info(self, message: str) -> None:
        info(message)

    def warn(self, message: str) -> None:
        warn(message)

    def check(self, result: Check) -> None:
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
    return build_image(loaded, push=True)


def _styled(result: Check) -> str:
    return check_lines(result, color=sys.stderr.isatty())[0]


def _wait(connection: Connection, target: Target, namespace: str, name: str, timeout: float | None) -> None:
    info(f"waiting for {target.kind} {namespace}/{name} to finish")
    final = jobs.wait_finished(connection.rest, target, namespace, name, timeout, on_retry=info)
    info(f"{target.kind} {namespace}/{name} {final}")
    if final != "Succeeded":
        sys.exit(1)


def _follow(connection: Connection, target: Target, namespace: str, name: str, timeout: float | None,
            exit_on_failure: bool = True) -> None:
    """`kubetrain logs -f` (merged logs, live progress line from the metrics); exit 1 if the job fails."""
    renderer = follow_renderer()
    options = logs.LogOptions(color=use_color("auto", sys.stdout))
    try:
        result = logs.follow_job_logs(connection, namespace, name, target, options, renderer.line, renderer.notice,
                                      timeout=timeout)
    finally:
        renderer.close()
    info(f"{target.kind} {namespace}/{name} {result.state}" + (f": {result.message}" if result.message else ""))
    if not result.ok and exit_on_failure:
        sys.exit(1)


def submit_to_controller(connection: Connection, loaded: LoadedSpec, namespace: str, dry_run: str,
                         output: str | None, overrides: dict[str, str] | None = None) -> str:
    """`kubetrain submit --controller`: apply the TrainingJob; the controller does the rest. Returns its name."""
    handed = submit_training_job(connection, loaded, namespace, dry_run, overrides)
    name = handed.name
    suffix = f" ({dry_run} dry run)" if dry_run != "none" else ""
    info(f"TrainingJob {namespace}/{name} handed to the controller{suffix}; follow it with "
         f"`kubectl get tj {name} -n {namespace} -w` or `kubetrain status {name}`")
    if output in ("yaml", "json"):
        emit_objects([handed.object], [], output)
    else:
        click.echo(f"trainingjob.kubetrain.dev/{name}" if output == "name" else name)
    return name
