"""kubetrain delete NAME."""

from __future__ import annotations

import click

from kubetrain.cli.cluster_opts import cluster_options, connect_from, target_option
from kubetrain.cli.output import handle_errors, info


@click.command()
@click.argument("name")
@cluster_options
@click.option("--wait", is_flag=True, help="Wait until the job and its pods are gone.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300, show_default=True,
              metavar="SECONDS", help="How long --wait waits.")
@target_option
@handle_errors
def delete(name: str, context: str | None, kubeconfig: str | None, namespace: str | None,
           request_timeout: float | None, wait: bool, timeout: float, target: str | None) -> None:
    """Delete a job and its code ConfigMap (its pods and Services go with it).

    A PyTorchJob/TrainJob made by `kubetrain controller` is deleted through its TrainingJob (otherwise the
    controller would re-create it).

    \b
    Examples:
      kubetrain delete llm-finetune
      kubetrain delete llm-finetune -n team-a --wait
    """
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.jobs import find_job
    from kubetrain.jobs.removal import delete_job

    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    found, job = find_job(connection.rest, ns, name, target)
    delete_job(connection, found, job, ns, wait, timeout, said=info)
