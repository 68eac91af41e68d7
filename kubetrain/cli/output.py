"""Where output goes: data on stdout, messages on stderr; errors become lines, never tracebacks."""

from __future__ import annotations

import contextlib
import functools
import io
import os
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


class _Stdout(io.TextIOWrapper):
    """sys.stdout whose write errors (a full disk, an I/O error; not a closed pipe, which the commands treat as
    the reader leaving) are OutputError: one line from the CLI edge instead of a traceback. fd 1 then points at
    /dev/null, so that the interpreter's own flush at exit does not fail a second time."""

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _lost(exc) from None

    def flush(self) -> None:
        try:
            super().flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _lost(exc) from None


def _lost(exc: OSError) -> OutputError:
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    return OutputError(f"cannot write to stdout: {exc.strerror or exc}")


def guard_stdout() -> None:
    """Route stdout through _Stdout (once, for the whole CLI process)."""
    stream = sys.stdout
    if isinstance(stream, io.TextIOWrapper) and not isinstance(stream, _Stdout):
        sys.stdout = _Stdout(stream.detach(), encoding=stream.encoding, errors=stream.errors,
                             line_buffering=stream.line_buffering)


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
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.render.yamlout import dump_json, dump_yaml

    if output == "yaml":
        click.echo(dump_yaml(objects), nl=False)
    elif output == "json":
        click.echo(dump_json(objects), nl=False)
    else:
        for name in names:
            click.echo(name)
