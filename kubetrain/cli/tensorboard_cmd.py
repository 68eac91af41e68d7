"""kubetrain tensorboard."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import click

from kubetrain.cli.cluster_opts import cluster_options, connect_from, target_option
from kubetrain.cli.common import load, spec_file_option
from kubetrain.cli.output import handle_errors, info, warn
from kubetrain.errors import UsageError


@click.command()
@click.argument("name", required=False)
@spec_file_option
@click.option("--volume", "volumes", multiple=True, metavar="NAME=DIR",
              help="The spec's volume NAME is DIR here, as for `kubetrain run`. Repeatable.")
@click.option("--logdir", default=None, metavar="DIR",
              help="Serve this directory (or s3://... URL) instead of the spec's tracking.tensorboard.logDir.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Port to serve on (default: 6006; with --cluster, a free one).")
@click.option("--cluster", "on_cluster", is_flag=True,
              help="Start a TensorBoard pod beside the running cluster job NAME (deleted with the job) and "
                   "forward --host:--port to it until Ctrl-C.")
@click.option("--timeout", type=click.FloatRange(min=1), default=300, show_default=True,
              help="With --cluster: seconds to wait for the pod to run.")
@target_option
@cluster_options
@handle_errors
def tensorboard(name: str | None, filename: str, volumes: tuple[str, ...], logdir: str | None, host: str,
                port: int | None, on_cluster: bool, timeout: float, target: str | None, context: str | None,
                kubeconfig: str | None, namespace: str | None, request_timeout: float | None) -> None:
    """Serve a job's TensorBoard event files.

    Locally, opens the event files of spec.tracking.tensorboard where `kubetrain run` wrote them (its
    logDir, with the spec's volumes at their local directories), or --logdir, until Ctrl-C (needs
    `pip install 'kubetrain[tensorboard]'`). NAME, if given, must be the spec's job name. With
    --cluster, starts a TensorBoard pod beside the running job NAME on its node, over the same volume
    (owned by the job: deleted with it), and forwards a local port to it through the API server (as
    `kubectl port-forward` does): prints its URL on stdout and serves until Ctrl-C.

    \b
    Examples:
      kubetrain tensorboard -f examples/digits/kubetrain.yaml
      kubetrain tensorboard digits-ddp --port 6007
      kubetrain tensorboard --logdir /mnt/ckpt/tb
      kubetrain tensorboard digits-ddp --cluster -n ml
    """
    if on_cluster:
        if name is None:
            raise UsageError("--cluster needs the job's NAME")
        _on_cluster(name, target, timeout, (host, port or 0), (context, kubeconfig, namespace, request_timeout))
        return
    from kubetrain.local.tensorboard import DEFAULT_PORT, TensorBoardPlan, local_logdir, require_tensorboard

    if logdir is None:
        loaded = load(filename)
        if name is not None and name != loaded.job.metadata.name:
            raise UsageError(f"{loaded.source} is the job {loaded.job.metadata.name!r}, not {name!r} "
                             "(give its spec with -f)")
        logdir = local_logdir(loaded, list(volumes), Path.cwd())
    require_tensorboard()
    plan = TensorBoardPlan(logdir, host, port or DEFAULT_PORT)
    info(f"TensorBoard of {logdir} at {plan.url} (Ctrl-C stops it)")
    argv = plan.argv()
    os.execv(argv[0], argv)  # TensorBoard is this process from here: Ctrl-C and the exit status are its own


def _on_cluster(name: str, target: str | None, timeout: float, listen: tuple[str, int],
                cluster: tuple[str | None, str | None, str | None, float | None]) -> None:
    from kubetrain.jobs import find_job
    from kubetrain.jobs.tensorboard import PORT, start_tensorboard, wait_running
    from kubetrain.kube.portforward import Forwarder

    context, kubeconfig, namespace, request_timeout = cluster
    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    found, job = find_job(connection.rest, ns, name, target)
    pod = start_tensorboard(connection.rest, found, job)
    pod_name = pod["metadata"]["name"]
    info(f"{name}: TensorBoard pod {ns}/{pod_name} (deleted with the job); waiting for it to run")
    wait_running(connection.rest, ns, pod_name, timeout)
    forwarder = Forwarder(connection.rest, ns, pod_name, PORT, host=listen[0], local_port=listen[1], report=warn)
    # A shell without job control starts background commands with SIGINT ignored; Ctrl-C is how this one stops.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        forwarder.check()
        host, port = forwarder.address
        info(f"{name}: forwarding {host}:{port} to {ns}/{pod_name}:{PORT} (Ctrl-C stops it)")
        click.echo(f"http://{host}:{port}/")
        sys.stdout.flush()  # a reader of the pipe gets the URL now, not at exit
        forwarder.serve_forever()
    except KeyboardInterrupt:
        info(f"{name}: port-forward stopped (the TensorBoard pod goes with the job)")
    finally:
        forwarder.close()
