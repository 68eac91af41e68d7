"""The `kubetrain` command: a click group whose verbs are imported only when run (fast --help, no torch)."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from kubetrain import __version__
from kubetrain.cli.commands import COMMANDS, GROUP_HELP, HELP_OPTIONS
from kubetrain.cli.output import fail, guard_stdout
from kubetrain.errors import OutputError


class LazyGroup(click.Group):
    """Imports a verb's module only when that verb runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, attr = COMMANDS[cmd_name][0].split(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, help=GROUP_HELP,
             context_settings={"help_option_names": list(HELP_OPTIONS), "max_content_width": 100})
@click.version_option(__version__, prog_name="kubetrain")
def cli() -> None:
    pass


def main(argv: list[str] | None = None) -> Any:
    """Console entry point: every KubetrainError becomes a one-line message and its exit code."""
    guard_stdout()
    try:
        try:
            return cli.main(args=argv, prog_name="kubetrain", standalone_mode=True)
        finally:
            sys.stdout.flush()  # the last block of output: its ENOSPC is seen here, not at exit
    except OutputError as exc:  # writing outside a command (--help, usage text) or after one
        fail(exc.lines(), exc.exit_code)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        fail(["interrupted"], 130)
