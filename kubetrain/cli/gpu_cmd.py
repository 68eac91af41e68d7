"""kubetrain gpu."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from typing import TYPE_CHECKING

import click

from kubetrain.cli.cluster_opts import cluster_options, connect_from, print_table, target_option
from kubetrain.cli.output import handle_errors, info
from kubetrain.jobs.crud import find_job
from kubetrain.jobs.gpu import HEADERS, job_gpus, notes, table_rows
from kubetrain.jobs.pods import check_replica_filter
from kubetrain.kube.errors import Unreachable
from kubetrain.kube.watch import RECONNECT_WINDOW

if TYPE_CHECKING:
    from kubetrain.jobs.gpu import PodGpus


@click.command()
@click.argument("name")
@click.option("--replica", default="all", show_default=True, metavar="REPLICA",
              help="all, a role (master, worker, node) or one replica (worker-2).")
@click.option("-w", "--watch", is_flag=True, help="Refresh every --interval seconds until interrupted.")
@click.option("--interval", type=click.FloatRange(min=0.5), default=2.0, show_default=True,
              help="Seconds between refreshes with --watch.")
@click.option("--count", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --watch, stop after N refreshes.")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format (json: one document per refresh).")
@target_option
@cluster_options
@handle_errors
def gpu(name: str, replica: str, watch: bool, interval: float, count: int | None, output: str,
        target: str | None, context: str | None, kubeconfig: str | None, namespace: str | None,
        request_timeout: float | None) -> None:
    """nvidia-smi from every pod of a job.

    Runs nvidia-smi --query-gpu in every running pod (kubectl exec; needs create on pods/exec) and shows
    one table: pod, GPU, name, utilization, memory used/total, temperature, power. A pod that is not
    running, requests no GPU (asked anyway: "no GPU: ...") or has no nvidia-smi gets a one-line explanation;
    the others still show.

    \b
    Examples:
      kubetrain gpu bert
      kubetrain gpu bert --watch --interval 5
      kubetrain gpu bert --replica worker -o json | jq '.pods[].gpus[].utilization'
    """
    wanted = check_replica_filter(replica)
    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    found, _ = find_job(connection.rest, ns, name, target)
    refreshes = 0
    lost = _Lost()
    while True:
        try:
            results = job_gpus(connection.rest, found, ns, name, wanted)
        except Unreachable as exc:
            if not watch:
                raise
            lost.wait(exc, interval)  # an API server restart: retry, as the other followers do
            continue
        lost.found()
        refreshes += 1
        _show(name, results, output, clear=watch and sys.stdout.isatty() and output == "table")
        if not watch or (count is not None and refreshes >= count):
            return
        time.sleep(interval)


class _Lost:
    """--watch keeps going while the API server is away, for up to watch.RECONNECT_WINDOW seconds."""

    def __init__(self) -> None:
        self.since: float | None = None

    def wait(self, exc: Exception, interval: float) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
            info(f"{exc}; retrying")
        if now - self.since > RECONNECT_WINDOW:
            raise exc
        time.sleep(min(interval, 2.0))

    def found(self) -> None:
        if self.since is not None:
            info("reconnected to the API server")
        self.since = None


def _show(name: str, results: list[PodGpus], output: str, clear: bool) -> None:
    if output == "json":
        click.echo(json.dumps({"job": name, "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                               "pods": [r.as_dict() for r in results]}))
        return
    if clear:
        click.echo("\x1b[H\x1b[2J", nl=False)
        click.echo(f"{name} · {dt.datetime.now().strftime('%H:%M:%S')} · Ctrl-C to stop", err=True)
    if not results:
        click.echo(f"{name} has no pods yet", err=True)
        return
    print_table(HEADERS, table_rows(results))
    for note in notes(results):
        click.echo(note, err=True)
