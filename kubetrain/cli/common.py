"""Options and steps shared by several verbs (spec file, output format, loading + rendering, reading and following
a job's logs): verbs import this, never each other."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import click

from kubetrain.cli.cluster_opts import connect_from, namespace_option
from kubetrain.errors import UsageError
from kubetrain.jobspec.load import DEFAULT_SPEC, LoadedSpec, load_spec

if TYPE_CHECKING:
    from kubetrain.jobs.logs import LogOptions
    from kubetrain.observe.render import Renderer


def render_loaded(loaded: LoadedSpec, *, target: str | None = None, namespace: str | None = None,
                  image: str | None = None, cloud: str | None = None, skip: tuple[Path, ...] = ()
                  ) -> list[dict[str, Any]]:
    """kubetrain.render.loaded.render_loaded, imported (with jinja2) by the verbs that render, not by every verb
    that loads a spec; and not through kubetrain.api, whose logging import render does not need. `skip`:
    directories never shipped as code (render's --out)."""
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.render.loaded import render_loaded as render

    return render(loaded, target=target, namespace=namespace, image=image, cloud=cloud, skip=skip)


F = TypeVar("F", bound=Callable[..., Any])
__all__ = ["Terminal", "archive_option", "follow_renderer", "load", "namespace_option", "read_job_logs",
           "render_loaded", "spec_file_option", "use_color", "warn_render", "write_atomically"]


def spec_file_option(func: F) -> F:
    """-f/--filename, like kubectl; '-' reads the spec from stdin."""
    return click.option("-f", "--filename", "filename", default=DEFAULT_SPEC, show_default=True,
                        metavar="FILE", help="The job spec ('-' for stdin).")(func)


def load(filename: str) -> LoadedSpec:
    return load_spec(filename)


def warn_render(loaded: LoadedSpec, cloud: str | None = None) -> None:
    """Print what rendering does that the spec may not expect (stderr); shared by render, submit and run."""
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.cli.output import warn
    from kubetrain.render import RenderOptions, render_warnings

    for message in render_warnings(loaded.job, RenderOptions(cloud=cloud)):
        warn(loaded.where(message))


def write_atomically(path: Path, text: str) -> None:
    """Write to a temp file beside `path` and rename, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # on a read-only or full filesystem the clean-up can fail too
            tmp.unlink(missing_ok=True)
        raise UsageError(f"{path}: cannot write: {exc.strerror}") from None


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
                  sink: Callable[[str], None], cluster: tuple[str | None, str | None, str | None, float | None]) -> int:
    """The job's logs so far (`logs NAME`, `metrics NAME`), or its archive once its pods or the job are gone
    (kubetrain.jobs.logs). With --archive, a cluster that cannot be reached also falls back to it."""
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.errors import ClusterError
    from kubetrain.jobs import logs as client_logs

    context, kubeconfig, namespace, request_timeout = cluster
    notice = Terminal().notice
    try:
        connection = connect_from(context, kubeconfig, request_timeout)
        ns = connection.namespace(namespace)
    except ClusterError as exc:
        if archive is None:
            raise
        return client_logs.print_archive(archive, name, options, sink, notice, str(exc))
    return client_logs.print_logs(connection, ns, name, target, options, sink, notice, archive=archive)


def follow_renderer(raw: bool = False) -> Renderer:
    """`logs -f` and `submit --follow`: the same view as `kubetrain run` (kubetrain.observe.render)."""
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.observe.render import Renderer

    return Renderer(sys.stdout, sys.stderr, raw=raw)
