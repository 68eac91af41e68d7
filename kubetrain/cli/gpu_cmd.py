"""kubetrain gpu."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from typing import TYPE_CHECKING

import click

from kubetrain.cli.cluster_opts import cluster_options, connect_from, print_table
from kubetrain.cli.output import handle_errors

if TYPE_CHECKING:
    from kubetrain.client.gpu import PodGpus


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
@click.option("--target", type=click.Choice(["pytorchjob", "trainjob"]), default=None,
              help="The job's kind (default: look among the installed ones).")
@cluster_options
@handle_errors
def gpu(name: str, replica: str, watch: bool, interval: float, count: int | None, output: str,
        target: str | None, context: str | None, kubeconfig: str | None, namespace: str | None,
        request_timeout: float | None) -> None:
    """nvidia-smi from every pod of a job.

    Runs nvidia-smi --query-gpu in every running pod (kubectl exec; needs create on pods/exec) and shows
    one table: pod, GPU, name, utilization, memory used/total, temperature, power. A pod that is not
    running, requests no GPU or has no nvidia-smi gets a one-line explanation; the others still show.

    \b
    Examples:
      kubetrain gpu bert
      kubetrain gpu bert --watch --interval 5
      kubetrain gpu bert --replica worker -o json | jq '.pods[].gpus[].utilization'
    """
    from kubetrain.client.gpu import job_gpus
    from kubetrain.client.logs import find_job
    from kubetrain.client.pods import check_replica_filter

    wanted = check_replica_filter(replica)
    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    found, _ = find_job(connection.api, ns, name, target)
    refreshes = 0
    while True:
        results = job_gpus(connection.api, found, ns, name, wanted)
        refreshes += 1
        _show(name, results, output, clear=watch and sys.stdout.isatty() and output == "table")
        if not watch or (count is not None and refreshes >= count):
            return
        time.sleep(interval)


def _show(name: str, results: list[PodGpus], output: str, clear: bool) -> None:
    from kubetrain.client.gpu import HEADERS, table_rows

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
