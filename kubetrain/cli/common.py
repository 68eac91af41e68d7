"""Options and steps shared by the verbs that read a job spec (spec file, loading + rendering, writing files):
verbs import this, never each other. Reading and following a job's logs is in kubetrain.cli.joblogs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kubetrain.cli.cluster_opts import namespace_option
from kubetrain.files import write_atomically
from kubetrain.jobspec.load import DEFAULT_SPEC, LoadedSpec, load_spec


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
__all__ = ["load", "namespace_option", "render_loaded", "spec_file_option", "warn_render", "write_atomically"]


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
