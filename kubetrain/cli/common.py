"""Options and steps shared by several verbs (spec file, output format, loading + rendering)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kubetrain.cli.cluster_opts import namespace_option
from kubetrain.errors import Problem, SpecError, UsageError
from kubetrain.spec.checks import spec_problems
from kubetrain.spec.load import DEFAULT_SPEC, LoadedSpec, load_spec

F = TypeVar("F", bound=Callable[..., Any])
__all__ = ["load", "namespace_option", "render_loaded", "spec_file_option", "warn_render",
           "write_atomically"]


def spec_file_option(func: F) -> F:
    """-f/--filename, like kubectl; '-' reads the spec from stdin."""
    return click.option("-f", "--filename", "filename", default=DEFAULT_SPEC, show_default=True,
                        metavar="FILE", help="The job spec ('-' for stdin).")(func)


def load(filename: str) -> LoadedSpec:
    return load_spec(filename)


def render_loaded(loaded: LoadedSpec, *, target: str | None = None, namespace: str | None = None,
                  image: str | None = None, cloud: str | None = None) -> list[dict[str, Any]]:
    """Read the spec's code directory (the only I/O) and render; shared by render, submit and run."""
    from kubetrain.render import RenderOptions, render_job
    from kubetrain.render.code import collect_code

    if target and target != loaded.job.spec.target:
        check_target(loaded, target)
    code = None
    if loaded.job.spec.code:
        code_dir = (loaded.base_dir / loaded.job.spec.code.path).resolve()
        code = collect_code(code_dir, loaded.job.spec.code.exclude, include=loaded.job.spec.code.include)
    options = RenderOptions(code=code, cloud=cloud, image=image, namespace=namespace)
    return render_job(loaded.job, options, target=target)


def warn_render(loaded: LoadedSpec, cloud: str | None = None) -> None:
    """Print what rendering does that the spec may not expect (stderr); shared by render, submit and run."""
    from kubetrain.cli.output import warn
    from kubetrain.render import RenderOptions, render_warnings

    for message in render_warnings(loaded.job, RenderOptions(cloud=cloud)):
        warn(message)


def check_target(loaded: LoadedSpec, target: str) -> None:
    """Re-run the spec's cross-field checks for an overridden target (e.g. `--target trainjob`)."""
    problems = spec_problems(loaded.job, target)
    if problems:
        raise SpecError([Problem(field, f"{message} (--target {target})", loaded.source)
                         for field, message in problems])


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
