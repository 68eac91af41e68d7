"""Reading and following a job's logs, shared by `logs`, `metrics` and `submit --follow`. Apart from
kubetrain.cli.common, which loads the job-spec machinery (pydantic): tailing a log by name needs none of it
(the start-up budget of `logs`, tests/cli/test_logs_gpu_doctor_cli.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

import click

from kubetrain.cli.cluster_opts import connect_from
from kubetrain.errors import ClusterError
from kubetrain.jobs import logs as client_logs

if TYPE_CHECKING:
    from kubetrain.jobs.logs import LogOptions, LogsRead
    from kubetrain.observe.render import Renderer

__all__ = ["Terminal", "archive_option", "follow_renderer", "read_job_logs", "use_color"]


def use_color(choice: str, stream: TextIO) -> bool:
    if choice != "auto":
        return choice == "always"
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


class Terminal:
    """`kubetrain logs` without -f: log lines on stdout, notices on stderr, as they are."""

    def line(self, text: str) -> None:
        sys.stdout.write(text + "\n")

    def notice(self, text: str) -> None:
        click.echo(text, err=True)


def archive_option(func: Any) -> Any:
    return click.option("--archive", metavar="URL", default=None,
                        help="Where the job's logs are archived (its spec.archive): read it when the job or its "
                             "pods are gone. Default: the location recorded on the job.")(func)


def read_job_logs(name: str, target: str | None, archive: str | None, options: LogOptions,
                  sink: Callable[[str], None], cluster: tuple[str | None, str | None, str | None, float | None]
                  ) -> LogsRead:
    """The job's logs so far (`logs NAME`, `metrics NAME`), or its archive once its pods or the job are gone
    (kubetrain.jobs.logs). With --archive, a cluster that cannot be reached also falls back to it."""
    context, kubeconfig, namespace, request_timeout = cluster
    notice = Terminal().notice
    try:
        connection = connect_from(context, kubeconfig, request_timeout)
        ns = connection.namespace(namespace)
    except ClusterError as exc:
        if archive is None:
            raise
        return client_logs.LogsRead(client_logs.print_archive(archive, name, options, sink, notice, str(exc)))
    return client_logs.print_logs(connection, ns, name, target, options, sink, notice, archive=archive)


def follow_renderer(raw: bool = False) -> Renderer:
    """`logs -f` and `submit --follow`: the same view as `kubetrain run` (kubetrain.observe.render)."""
    from kubetrain.observe.render import Renderer

    return Renderer(sys.stdout, sys.stderr, raw=raw)
