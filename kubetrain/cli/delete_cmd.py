"""kubetrain delete NAME."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kubetrain.cli.cluster_opts import cluster_options, connect_from
from kubetrain.cli.output import handle_errors, info
from kubetrain.cli.status_cmd import installed_targets

if TYPE_CHECKING:
    from kubetrain.client.connection import Connection
    from kubetrain.client.targets import Target


@click.command()
@click.argument("name")
@cluster_options
@click.option("--wait", is_flag=True, help="Wait until the job and its pods are gone.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300, show_default=True,
              metavar="SECONDS", help="How long --wait waits.")
@handle_errors
def delete(name: str, context: str | None, kubeconfig: str | None, namespace: str | None,
        request_timeout: float | None, wait: bool,
           timeout: float) -> None:
    """Delete a job and its code ConfigMap (its pods and Services go with it).

    A PyTorchJob/TrainJob made by `kubetrain controller` is deleted through its TrainingJob (otherwise the
    controller would re-create it).

    \b
    Examples:
      kubetrain delete llm-finetune
      kubetrain delete llm-finetune -n team-a --wait
    """
    from kubetrain.client import apply, jobs
    from kubetrain.render.context import JOB_LABEL

    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    from kubetrain.client.targets import TRAININGJOB, controlling_trainingjob

    target, job = jobs.find(connection.rest, installed_targets(connection), ns, name)
    owner = controlling_trainingjob(job)
    if owner is not None:
        jobs.delete(connection.rest, TRAININGJOB, ns, owner, propagation="Background")
        info(f"{TRAININGJOB.kind} {ns}/{owner} deleted (it controls {target.kind} {name})")
    jobs.delete(connection.rest, target, ns, name, propagation="Background")
    # Owned by the job, so the garbage collector removes it anyway; deleting it here also covers
    # ConfigMaps of an older kubetrain or a submit interrupted between its writes.
    configmaps = apply.delete_configmaps(connection.api, ns, name, JOB_LABEL)
    info(f"{target.kind} {ns}/{name} deleted" + (f" (and {configmaps} code ConfigMap(s))" if configmaps else ""))
    if wait:
        jobs.wait_gone(connection.rest, target, ns, name, timeout)
        _wait_pods_gone(connection, target, ns, name, timeout)
        info(f"{target.kind} {ns}/{name}: job and pods gone")


def _wait_pods_gone(connection: Connection, target: Target, namespace: str, name: str, timeout: float) -> None:
    from kubetrain.client import watch
    from kubetrain.client.errors import cluster_errors
    from kubetrain.client.pods import pods_list_fn

    with cluster_errors(f"watch pods in namespace {namespace}"):
        watch.wait_for(pods_list_fn(connection.rest, namespace), lambda cache: not cache,
                       timeout=timeout, what=f"the pods of {name} to be deleted",
                       label_selector=target.pod_selector(name))
