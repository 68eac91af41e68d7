"""Where output goes: data on stdout, messages on stderr; errors become lines, never tracebacks."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from kubetrain.errors import KubetrainError, OutputError

F = TypeVar("F", bound=Callable[..., Any])


def info(message: str) -> None:
    click.echo(message, err=True)


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def fail(lines: list[str], code: int) -> NoReturn:
    for line in lines:
        click.echo(f"error: {line}", err=True)
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Turn kubetrain's typed errors (and unexpected OS errors) into messages and exit codes, once."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except KubetrainError as exc:
            fail(exc.lines(), exc.exit_code)
        except BrokenPipeError:  # `kubetrain render | head`: the reader left; not an error of ours
            sys.stderr.close()
            sys.exit(0)

    return wrapper  # type: ignore[return-value]


def emit(text: str) -> None:
    """Write data to stdout and flush, so a full disk (ENOSPC) or a closed pipe is seen here, not at exit."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(f"cannot write to stdout: {exc.strerror or exc}") from None


def emit_objects(objects: list[dict[str, Any]], names: list[str], output: str | None) -> None:
    """-o yaml / json: the objects; else one name a line."""
    from kubetrain.render.yamlout import dump_json, dump_yaml

    if output == "yaml":
        click.echo(dump_yaml(objects), nl=False)
    elif output == "json":
        click.echo(dump_json(objects), nl=False)
    else:
        for name in names:
            click.echo(name)
