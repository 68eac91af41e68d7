"""kubetrain stacks."""

from __future__ import annotations

import click

from kubetrain.cli.cluster_opts import cluster_options, connect_from, target_option
from kubetrain.cli.output import fail, handle_errors, info
from kubetrain.jobs.crud import find_job
from kubetrain.jobs.pods import check_replica_filter
from kubetrain.jobs.stacks import job_stacks


@click.command()
@click.argument("name")
@click.option("--replica", default="all", show_default=True, metavar="REPLICA",
              help="all, a role (master, worker, node) or one replica (worker-2).")
@target_option
@cluster_options
@handle_errors
def stacks(name: str, replica: str, target: str | None, context: str | None, kubeconfig: str | None,
           namespace: str | None, request_timeout: float | None) -> None:
    """Every rank's Python stack from a running job, grouped.

    In every running pod (kubectl exec; needs create on pods/exec), asks the training processes for every
    thread's stack (the kubetrain runtime's writer thread answers; SIGUSR2 only to a process that does not)
    and reads back their progress records. Prints the
    verdict (hung or not, and who is behind), stragglers, torch's flight recorder, and the stacks: ranks
    with the same stack once, outliers first. A rank that cannot answer (stopped, uninterruptible) is
    named with its process state. Exit 1 when no pod has a rank to ask (not running, or a script that
    does not use the kubetrain runtime).

    \b
    Examples:
      kubetrain stacks bert
      kubetrain stacks bert -n team-a --replica worker-3
    """
    wanted = check_replica_filter(replica)
    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    found, _ = find_job(connection.rest, ns, name, target)
    report = job_stacks(connection.rest, found, ns, name, wanted)
    for line in report.messages():
        info(line)
    if not report.has_ranks:
        fail([f"no rank of {name} to ask: no running pod has a kubetrain runtime progress record (docs/hangs.md)"],
             1)
    for line in report.lines():
        click.echo(line)
