"""Deleting a job: the job (and a TrainingJob controlling it), its code ConfigMaps, and optionally waiting
until the job and its pods are gone. Shared by `kubetrain delete` and kubetrain.api.delete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubetrain.jobs import apply
from kubetrain.jobs import crud as jobs
from kubetrain.jobs.pods import pods_list_fn
from kubetrain.jobs.targets import TRAININGJOB, controlling_trainingjob
from kubetrain.kube import watch
from kubetrain.kube.errors import cluster_errors
from kubetrain.kube.objects import JOB_LABEL

if TYPE_CHECKING:
    from kubetrain.jobs.targets import Target
    from kubetrain.kube.connection import Connection


def delete_job(connection: Connection, target: Target, job: dict[str, Any], namespace: str, wait: bool,
               timeout: float | None, said: Any = None) -> list[str]:
    """Delete; returns one line per thing deleted (`said`, if given, gets each line as it happens)."""
    name = job["metadata"]["name"]
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if said is not None:
            said(line)

    owner = controlling_trainingjob(job)
    if owner is not None:
        jobs.delete(connection.rest, TRAININGJOB, namespace, owner, propagation="Background")
        say(f"{TRAININGJOB.kind} {namespace}/{owner} deleted (it controls {target.kind} {name})")
    jobs.delete(connection.rest, target, namespace, name, propagation="Background")
    # Owned by the job, so the garbage collector removes it anyway; deleting it here also covers
    # ConfigMaps of an older kubetrain or a submit interrupted between its writes.
    configmaps = apply.delete_configmaps(connection.rest, namespace, name, JOB_LABEL)
    say(f"{target.kind} {namespace}/{name} deleted" + (f" (and {configmaps} code ConfigMap(s))" if configmaps else ""))
    if wait:
        jobs.wait_gone(connection.rest, target, namespace, name, timeout)
        _wait_pods_gone(connection, target, namespace, name, timeout)
        say(f"{target.kind} {namespace}/{name}: job and pods gone")
    return lines


def _wait_pods_gone(connection: Connection, target: Target, namespace: str, name: str,
                    timeout: float | None) -> None:
    with cluster_errors(f"watch pods in namespace {namespace}"):
        watch.wait_for(pods_list_fn(connection.rest, namespace), lambda cache: not cache,
                       timeout=timeout, what=f"the pods of {name} to be deleted",
                       label_selector=target.pod_selector(name))
