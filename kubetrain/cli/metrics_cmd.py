"""kubetrain metrics."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kubetrain.cli.cluster_opts import cluster_options
from kubetrain.cli.joblogs import archive_option, read_job_logs
from kubetrain.cli.output import handle_errors, info
from kubetrain.errors import UsageError
from kubetrain.jobs.logs import LogOptions
from kubetrain.observe import history as hist
from kubetrain.observe.history import from_lines, to_csv

if TYPE_CHECKING:
    from kubetrain.observe.history import History


@click.command()
@click.argument("name", required=False)
@click.option("--local", "local", type=click.Path(path_type=Path), default=None, metavar="PATH",
              help="Read a file or a directory of *.log files (kubetrain run --log-dir DIR) instead of a job.")
@click.option("-o", "--output", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="table: a table and terminal plots; csv/json: every train/eval record (json: all records).")
@click.option("--compare", metavar="OTHER", default=None,
              help="Overlay another run: a job name, or a path as for --local.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
              help="Also write one self-contained HTML report with interactive charts (no network needed).")
@click.option("--no-plots", is_flag=True, help="With -o table: the table only.")
@click.option("--target", type=click.Choice(["pytorchjob", "trainjob"]), default=None,
              help="The job's kind (default: look among the installed ones).")
@archive_option
@cluster_options
@handle_errors
def metrics(name: str | None, local: Path | None, output: str, compare: str | None, html_path: Path | None,
            no_plots: bool, target: str | None, archive: str | None, context: str | None, kubeconfig: str | None,
            namespace: str | None, request_timeout: float | None) -> None:
    """Metrics history of a job: table, plots, CSV/JSON, HTML report.

    Reads the KUBETRAIN_METRICS lines from the job's logs (NAME, on the cluster) or from files
    (--local). Data goes to stdout; messages to stderr.

    \b
    Examples:
      kubetrain metrics bert
      kubetrain metrics --local runs/a --compare runs/b --html report.html
      kubetrain metrics bert -o csv > bert.csv
    """
    if (name is None) == (local is None):
        raise UsageError("give a job NAME or --local PATH (one of them)")

    def load(source: str | Path) -> History:
        if isinstance(source, Path) or Path(source).exists():
            # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
            from kubetrain.observe.history import from_local

            return from_local(Path(source))
        return _from_job(str(source), target, archive, (context, kubeconfig, namespace, request_timeout))

    histories = [load(local if local is not None else str(name))]
    if compare:
        histories.append(load(compare))
    for history in histories:
        if not history.records:
            info(f"{history.name}: no metrics lines (KUBETRAIN_METRICS) found")
    _print(histories, output, no_plots)
    if html_path is not None:
        # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
        from kubetrain.cli.common import write_atomically
        from kubetrain.observe.html import report_html

        write_atomically(html_path, report_html(histories))  # an unwritable path: one line, exit 2
        info(f"wrote {html_path}")


def _print(histories: list[History], output: str, no_plots: bool) -> None:
    if output == "csv":
        sys.stdout.write("".join(_csv(h, len(histories) > 1, first=i == 0) for i, h in enumerate(histories)))
        return
    if output == "json":
        sys.stdout.write(hist.to_json(histories[0]) if len(histories) == 1
                         else "[" + ",".join(hist.to_json(h) for h in histories) + "]\n")
        return
    for history in histories:
        if len(histories) > 1:
            sys.stdout.write(f"== {history.name}\n")
        sys.stdout.write(hist.table_text(history))
    if not no_plots and any(h.records for h in histories):
        # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
        from kubetrain.observe.plots import plot_text

        sys.stdout.write("\n" + plot_text(histories, color=sys.stdout.isatty()) + "\n")


def _csv(history: History, with_run: bool, first: bool) -> str:
    lines = to_csv(history).splitlines()
    if not first:
        lines = lines[1:]
    if with_run:
        lines = [("run," if first and i == 0 else f"{history.name},") + line for i, line in enumerate(lines)]
    return "".join(line + "\n" for line in lines)


def _from_job(name: str, target: str | None, archive: str | None,
              cluster: tuple[str | None, str | None, str | None, float | None]) -> History:
    """The job's logs, as `kubetrain logs NAME` reads them (every replica; rank 0 prints the metrics), or
    its archive when the job or its pods are gone."""
    lines: list[str] = []
    read_job_logs(name, target, archive, LogOptions(), lines.append, cluster)
    return from_lines(name, lines)
