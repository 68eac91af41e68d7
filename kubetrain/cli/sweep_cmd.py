"""kubetrain sweep run | best (this machine) and submit | status | stop (a Sweep in the cluster)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from kubetrain.cli.cluster_opts import cluster_options, connect_from
from kubetrain.cli.common import load, spec_file_option
from kubetrain.cli.output import emit, handle_errors, info
from kubetrain.errors import UsageError

if TYPE_CHECKING:
    from kubetrain.jobspec.load import LoadedSpec
    from kubetrain.jobspec.model import TrainingJob
    from kubetrain.jobspec.sweep import Sweep
    from kubetrain.sweeps.state import SweepState

REFRESH_SECONDS = 1.0
output_option = click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table",
                             show_default=True, help="Results format on stdout.")


@click.group()
def sweep() -> None:
    """Hyperparameter sweeps over a job: the spec's `sweep` section (docs/sweeps.md).

    \b
    Examples:
      kubetrain sweep run -f examples/digits/kubetrain-sweep.yaml
      kubetrain sweep best --promote kubetrain-best.yaml
      kubetrain sweep submit -f examples/digits/kubetrain-sweep.yaml    # a Sweep the controller runs
      kubetrain sweep status digits --watch
      kubetrain sweep stop digits
    """


class LiveTable:
    """The results table on a terminal (stderr), redrawn at most once a REFRESH_SECONDS; elsewhere one line per
    event (trial started, pruned, ended)."""

    def __init__(self, sweep: Sweep, stream: TextIO) -> None:
        self.sweep = sweep
        self.stream = stream
        self.tty = stream.isatty()
        self.drawn = 0
        self.last = 0.0

    def changed(self, state: SweepState) -> None:
        now = time.time()
        if not self.tty or now - self.last < REFRESH_SECONDS:
            return
        self.redraw(state)

    def redraw(self, state: SweepState) -> None:
        from kubetrain.sweeps.table import format_table

        now = self.last = time.time()
        lines = format_table(self.sweep, state, now)
        self.stream.write(f"\x1b[{self.drawn}F\x1b[J" if self.drawn else "")
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self.drawn = len(lines)

    def notify(self, line: str) -> None:
        if not self.tty:
            info(line)


@sweep.command("run")
@spec_file_option
@output_option
@handle_errors
def run(*, filename: str, output: str) -> None:
    """Run the spec's sweep on this machine: each trial a `kubetrain run`.

    `sweep.parallelism` trials at a time; a live table (trial, parameters, state, step, objective, best so
    far, ETA) on stderr when it is a terminal, else one line per event; the results on stdout at the end.
    A pruned trial's processes get SIGTERM, and SIGKILL 10 s later. State, logs and the trials' checkpoints
    are kept in .kubetrain/sweeps/<name>/ beside the spec (a new run starts afresh). Exit status 0 when a
    trial completed, 1 when none did, 130 on Ctrl-C.

    \b
    Examples:
      kubetrain sweep run -f examples/digits/kubetrain-sweep.yaml
      kubetrain sweep run -o json > results.json
    """
    from kubetrain.local.preflight import require_torch
    from kubetrain.local.sweep import LocalSweep

    loaded = _sweep_spec(filename)
    assert loaded.job.sweep is not None
    require_torch()
    table = LiveTable(loaded.job.sweep, sys.stderr)
    info(f"kubetrain sweep: {loaded.job.metadata.name}: {loaded.job.sweep.trial_count} trial(s), "
         f"{loaded.job.sweep.parallelism} at a time")
    runner = LocalSweep(loaded, table.changed, table.notify)
    try:
        state = runner.run()
    except KeyboardInterrupt:
        sys.exit(130)
    best = _print_results(loaded.job, state, output)
    if best is None:
        info("kubetrain sweep: no trial completed")
        sys.exit(1)


@sweep.command("best")
@click.argument("name", required=False)
@spec_file_option
@cluster_options
@output_option
@click.option("--promote", metavar="FILE", default=None,
              help="Write the best trial as a plain kubetrain.yaml (no sweep section) to FILE ('-': stdout).")
@click.option("--force", is_flag=True, help="With --promote: overwrite FILE if it exists.")
@handle_errors
def best(*, name: str | None, filename: str, context: str | None, kubeconfig: str | None, namespace: str | None,
         request_timeout: float | None, output: str, promote: str | None, force: bool) -> None:
    """The best trial of a sweep, and (--promote) its spec.

    Of the Sweep NAME in the cluster, or without NAME of the spec's last local sweep (`kubetrain sweep run`).

    The promoted spec is the sweep's job with the best trial's values, its own name and checkpoint directory:
    `kubetrain run` or `kubetrain submit` it as any job. An existing FILE is kept unless --force. Exit status
    1 when no trial has completed yet.

    \b
    Examples:
      kubetrain sweep best
      kubetrain sweep best --promote kubetrain-best.yaml
      kubetrain sweep best digits -n team-a --promote kubetrain-best.yaml
    """
    from kubetrain.sweeps.promote import best_trial, promoted_yaml, write_promoted

    if name is None:
        job, state, origin = _local_results(filename)
    else:
        _refuse_spec_file_with_name()
        job, state, origin = _cluster_results(name, context, kubeconfig, namespace, request_timeout)
    winner = best_trial(job, state, origin)
    if promote is None:
        _print_results(job, state, output, only_best=True)
        return
    text = promoted_yaml(job, origin, winner)
    if promote == "-":
        emit(text)
    else:
        write_promoted(Path(promote), text, force)
        info(f"kubetrain sweep: trial {winner.number} written to {promote}")


def _local_results(filename: str) -> tuple[TrainingJob, SweepState, str]:
    from kubetrain.local.sweep import read_state

    loaded = _sweep_spec(filename)
    return loaded.job, read_state(loaded), Path(loaded.source).name


def _cluster_results(name: str, context: str | None, kubeconfig: str | None, namespace: str | None,
                     request_timeout: float | None) -> tuple[TrainingJob, SweepState, str]:
    from kubetrain.jobs import sweeps as cluster_sweeps

    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    job, state, _ = cluster_sweeps.read(connection.rest, ns, name)
    return job, state, f"Sweep {ns}/{name}"


def _refuse_spec_file_with_name() -> None:
    source = click.get_current_context().get_parameter_source("filename")
    if source is not None and source.name == "COMMANDLINE":
        raise UsageError("give a Sweep's NAME (in the cluster) or -f FILE (a local sweep), not both")


def _sweep_spec(filename: str) -> LoadedSpec:
    loaded = load(filename)
    if loaded.job.sweep is None:
        raise UsageError(f"{loaded.source}: no `sweep` section (docs/sweeps.md)")
    return loaded


def _print_results(job: TrainingJob, state: SweepState, output: str, only_best: bool = False) -> Any:
    from kubetrain.render.yamlout import dump_json, dump_yaml
    from kubetrain.sweeps.engine import Engine
    from kubetrain.sweeps.state import SweepState
    from kubetrain.sweeps.table import format_table, results

    sweep = job.sweep
    assert sweep is not None
    winner = Engine(sweep).best(state)
    shown = SweepState([winner], state.started) if only_best and winner else state
    if output == "table":
        emit("\n".join(format_table(sweep, shown)) + "\n")
        if winner is not None and not only_best:
            emit(f"best: trial {winner.number} {sweep.objective.metric}={winner.value:.6g} {winner.params}\n")
    else:
        data = results(job.metadata.name, sweep, shown, winner)
        emit(dump_json([data]) if output == "json" else dump_yaml([data]))
    return winner


@sweep.command("submit")
@spec_file_option
@cluster_options
@click.option("--dry-run", "dry_run", is_flag=True, help="Let the API server check the Sweep; create nothing.")
@handle_errors
def submit(*, filename: str, context: str | None, kubeconfig: str | None, namespace: str | None,
           request_timeout: float | None, dry_run: bool) -> None:
    """Create (or update) the spec's sweep as a Sweep resource: the controller runs its trials as TrainingJobs.

    Needs `kubetrain controller install`. Prints the Sweep's name (sweep/NAME) on stdout.

    \b
    Examples:
      kubetrain sweep submit -f examples/digits/kubetrain-sweep.yaml -n team-a
    """
    from kubetrain.jobs import sweeps as cluster_sweeps

    loaded = _sweep_spec(filename)
    connection = connect_from(context, kubeconfig, request_timeout)
    ns = namespace or loaded.job.metadata.namespace or connection.namespace(None)
    cluster_sweeps.submit(connection.rest, loaded.job, ns, dry_run)
    emit(f"sweep/{loaded.job.metadata.name}\n")
    info(f"kubetrain sweep: {loaded.job.metadata.name} {'checked (dry run)' if dry_run else 'submitted'} in "
         f"namespace {ns}: kubetrain sweep status {loaded.job.metadata.name} -n {ns} --watch")


@sweep.command("status")
@click.argument("name")
@cluster_options
@output_option
@click.option("-w", "--watch", is_flag=True, help="Redraw the table every --interval seconds until the sweep ends.")
@click.option("--interval", type=click.FloatRange(min=1), default=5, show_default=True, metavar="SECONDS",
              help="Seconds between two reads with --watch (one GET of the Sweep each).")
@handle_errors
def status(*, name: str, context: str | None, kubeconfig: str | None, namespace: str | None,
           request_timeout: float | None, output: str, watch: bool, interval: float) -> None:
    """A Sweep's trials in the cluster: the same table as `kubetrain sweep run`'s.

    \b
    Examples:
      kubetrain sweep status digits
      kubetrain sweep status digits -w
      kubetrain sweep status digits -o json
    """
    from kubetrain.jobs import sweeps as cluster_sweeps

    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    job, state, obj = cluster_sweeps.read(connection.rest, ns, name)
    while watch and sys.stdout.isatty() and _phase(obj) in ("", "Running", "Stopping"):
        assert job.sweep is not None
        LiveTable(job.sweep, sys.stdout).redraw(state)
        time.sleep(interval)
        job, state, obj = cluster_sweeps.read(connection.rest, ns, name)
    _print_results(job, state, output)
    info(f"sweep {name}: {_phase(obj) or 'Pending'}")


def _phase(obj: dict[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


@sweep.command("stop")
@click.argument("name")
@cluster_options
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300, show_default=True,
              metavar="SECONDS", help="How long to wait for the trials (and their pods) to go.")
@handle_errors
def stop(*, name: str, context: str | None, kubeconfig: str | None, namespace: str | None,
         request_timeout: float | None, timeout: float) -> None:
    """Stop a Sweep: no more trials, every trial's TrainingJob deleted (with its pods, Services and ConfigMaps).

    The Sweep itself stays, with its results (`kubetrain sweep status`); `kubectl delete sweep NAME` removes it.

    \b
    Examples:
      kubetrain sweep stop digits -n team-a
    """
    from kubetrain.jobs import sweeps as cluster_sweeps

    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    deleted = cluster_sweeps.stop(connection.rest, ns, name, timeout)
    info(f"kubetrain sweep: {name} stopped; {len(deleted)} trial(s) deleted")
