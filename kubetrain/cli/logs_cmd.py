"""kubetrain logs."""

from __future__ import annotations

import re
import sys

import click

from kubetrain.cli.cluster_opts import cluster_options, connect_from, target_option
from kubetrain.cli.joblogs import Terminal, archive_option, follow_renderer, read_job_logs, use_color
from kubetrain.cli.output import fail, handle_errors
from kubetrain.errors import UsageError

UNREACHABLE = 3  # as for a cluster that cannot be reached (docs/cluster.md's exit codes)
_DURATION = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    """kubectl's --since: 30s, 5m, 2h, 1h30m → seconds."""
    value = text.strip().lower()
    parts = _DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise UsageError(f"--since {text}: expected a duration such as 30s, 5m, 2h or 1h30m")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"--since {text}: must be more than 0s")
    return seconds


@click.command()
@click.argument("name")
@click.option("--replica", default="all", show_default=True, metavar="REPLICA",
              help="all, a role (master, worker, node) or one replica (worker-2).")
@click.option("-f", "--follow", is_flag=True,
              help="Wait through Pending (printing scheduling events), follow every pod across restarts, "
                   "and end when the job ends (exit 1 if it failed).")
@click.option("--since", default=None, metavar="DURATION", help="Only lines newer than this (30s, 5m, 2h).")
@click.option("--tail", type=click.IntRange(min=0), default=None, metavar="N",
              help="Only the last N lines of each replica.")
@click.option("-p", "--previous", is_flag=True,
              help="The previous container of each replica (the last logs of a crashed container).")
@click.option("--timestamps", is_flag=True, help="Show each line's RFC 3339 timestamp after the prefix.")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colour the replica prefixes (auto: only on a terminal, and not with NO_COLOR).")
@click.option("--raw", is_flag=True,
              help="With -f: keep the KUBETRAIN_METRICS {json} lines on stdout (without -f they always are).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="With -f: give up after this long (exit 4). A lost API server is retried until then "
                   "(without --timeout: for 5 minutes, then exit 3).")
@target_option
@archive_option
@cluster_options
@handle_errors
def logs(name: str, replica: str, follow: bool, since: str | None, tail: int | None, previous: bool,
         timestamps: bool, color: str, raw: bool, timeout: float | None, target: str | None, archive: str | None,
         context: str | None,
         kubeconfig: str | None, namespace: str | None, request_timeout: float | None) -> None:
    """Merged logs of every replica of a job.

    Each line is prefixed with its replica ([master-0], [worker-1], [node-2]); without -f, lines of all
    replicas are merged in time order. Log lines go to stdout; waiting messages and events to stderr.
    With -f, metrics lines become a live progress line and a final summary, as in `kubetrain run`.
    Without -f, a replica whose node is down or whose kubelet does not answer within --request-timeout is
    named on stderr, the others' lines are printed, and the exit code is 3.

    \b
    Examples:
      kubetrain logs bert -f
      kubetrain logs bert --replica worker-2 --previous
      kubetrain logs bert --since 10m --tail 100 -n research
    """
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.jobs import logs as client_logs
    from kubetrain.jobs.pods import check_replica_filter

    check_replica_filter(replica)
    if previous and follow:
        raise UsageError("--previous reads a finished container; it cannot be combined with -f")
    if timeout is not None and not follow:
        raise UsageError("--timeout applies to -f only")
    options = client_logs.LogOptions(replica=replica, since_seconds=parse_duration(since) if since else None,
                                     tail=tail, previous=previous, timestamps=timestamps,
                                     color=use_color(color, sys.stdout))
    if not follow:
        read = read_job_logs(name, target, archive, options, Terminal().line,
                             (context, kubeconfig, namespace, request_timeout))
        if read.unreachable:  # what could be read was printed; the lines above said which node and why
            fail([f"no logs of {', '.join(read.unreachable)}: node down or kubelet not answering"], UNREACHABLE)
        return
    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    renderer = follow_renderer(raw)
    try:
        result = client_logs.follow_job_logs(connection, ns, name, target, options, renderer.line, renderer.notice,
                                             timeout=timeout)
    finally:
        renderer.close()
    if not result.ok:
        fail([f"{name} {result.state.lower()}" + (f": {result.message}" if result.message else "")], 1)
    click.echo(f"{name} {result.state.lower()}" + (f": {result.message}" if result.message else ""), err=True)
