"""Flags and output helpers shared by the verbs that talk to a cluster (kubectl's conventions).

Importing this module imports neither the kubernetes client nor the spec model (pydantic): `status`,
`list` and `logs` start in a fraction of a second. `connect_from` imports the REST client when called.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from kubetrain.kube.objects import parse_time

if TYPE_CHECKING:
    from kubetrain.kube.connection import Connection

F = TypeVar("F", bound=Callable[..., Any])


def namespace_option(func: F) -> F:
    return click.option("-n", "--namespace", default=None, metavar="NS",
                        help="Namespace (default: the spec's, then the context's, then 'default').")(func)


class Duration(click.ParamType):  # type: ignore[type-arg]
    """kubectl's --request-timeout: seconds as a number, or 1s / 2m / 1h; 0 means the default."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float | None:
        if isinstance(value, int | float):
            return float(value) or None
        text = str(value).strip().lower()
        scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], 0)
        try:
            number = float(text[:-1] if scale else text) * (scale or 1)
        except ValueError:
            self.fail(f"{value!r}: expected seconds or a duration such as 30s, 2m, 1h", param, ctx)
        if number < 0:
            self.fail(f"{value!r}: must not be negative", param, ctx)
        return number or None


def cluster_options(func: F) -> F:
    """--context, --kubeconfig (KUBECONFIG is honoured too), -n/--namespace and --request-timeout."""
    func = click.option("--request-timeout", "request_timeout", type=Duration(), default=None, metavar="DURATION",
                        help="Give up on a single request the API server does not answer within this (30s, 2m; "
                             "default 30s; watches and log streams are not cut by it).")(func)
    func = namespace_option(func)
    func = click.option("--kubeconfig", default=None, metavar="FILE",
                        help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).")(func)
    return click.option("--context", default=None, metavar="NAME", help="kubeconfig context to use.")(func)


def target_option(func: F) -> F:
    """--target for commands that look a job up by name (when a PyTorchJob and a TrainJob share it)."""
    return click.option("--target", type=click.Choice(["pytorchjob", "trainjob"]), default=None,
                        help="The job's kind (default: look among the installed ones).")(func)


def connect_from(context: str | None, kubeconfig: str | None, request_timeout: float | None = None) -> Connection:
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.kube.connection import connect

    return connect(context, kubeconfig, request_timeout)


def is_tty() -> bool:
    return sys.stdout.isatty()


def age(created: str, now: dt.datetime | None = None) -> str:
    """kubectl's AGE: 45s, 12m, 5h, 3d."""
    if not created:
        return "?"
    then = parse_time(created)
    if then is None:
        return "?"
    seconds = int(((now or dt.datetime.now(dt.UTC)) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A table on stdout: rich on a terminal, plain aligned columns otherwise (for grep/awk)."""
    if is_tty():
        # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
        from rich.console import Console
        from rich.table import Table

        table = Table(box=None, header_style="bold", pad_edge=False)
        for header in headers:
            table.add_column(header)
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in [headers, *rows]:
        click.echo("   ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip())
