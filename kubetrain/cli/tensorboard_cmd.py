"""kubetrain tensorboard."""

from __future__ import annotations

import os
from pathlib import Path

import click

from kubetrain.cli.common import load, spec_file_option
from kubetrain.cli.output import handle_errors, info
from kubetrain.errors import UsageError


@click.command()
@click.argument("name", required=False)
@spec_file_option
@click.option("--volume", "volumes", multiple=True, metavar="NAME=DIR",
              help="The spec's volume NAME is DIR here, as for `kubetrain run`. Repeatable.")
@click.option("--logdir", default=None, metavar="DIR",
              help="Serve this directory (or s3://... URL) instead of the spec's tracking.tensorboard.logDir.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on.")
@click.option("--port", type=click.IntRange(1, 65535), default=6006, show_default=True, help="Port to serve on.")
@handle_errors
def tensorboard(name: str | None, filename: str, volumes: tuple[str, ...], logdir: str | None, host: str,
                port: int) -> None:
    """Serve a job's TensorBoard event files on this machine.

    Opens the event files of spec.tracking.tensorboard where `kubetrain run` wrote them (its logDir,
    with the spec's volumes at their local directories), or --logdir. NAME, if given, must be the
    spec's job name. Runs TensorBoard until Ctrl-C; needs `pip install 'kubetrain[tensorboard]'`.

    \b
    Examples:
      kubetrain tensorboard -f examples/digits/kubetrain.yaml
      kubetrain tensorboard digits-ddp --port 6007
      kubetrain tensorboard --logdir /mnt/ckpt/tb
    """
    from kubetrain.local.tensorboard import TensorBoardPlan, local_logdir, require_tensorboard

    if logdir is None:
        loaded = load(filename)
        if name is not None and name != loaded.job.metadata.name:
            raise UsageError(f"{loaded.source} is the job {loaded.job.metadata.name!r}, not {name!r} "
                             "(give its spec with -f)")
        logdir = local_logdir(loaded, list(volumes), Path.cwd())
    require_tensorboard()
    plan = TensorBoardPlan(logdir, host, port)
    info(f"TensorBoard of {logdir} at {plan.url} (Ctrl-C stops it)")
    argv = plan.argv()
    os.execv(argv[0], argv)  # TensorBoard is this process from here: Ctrl-C and the exit status are its own
