"""A Sweep resource in the cluster: submit it, read its state, stop it (every trial's TrainingJob deleted, and
with them their pods, Services and ConfigMaps). The controller runs the search (kubetrain.controller.sweeps)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from kubetrain.errors import KubetrainError
from kubetrain.jobspec.model import TrainingJob
from kubetrain.kube.errors import NotFound
from kubetrain.kube.objects import SWEEP_LABEL
from kubetrain.kube.rest import Rest, path_of
from kubetrain.sweeps.resource import GROUP, PLURAL, VERSION, load_sweep, sweep_resource
from kubetrain.sweeps.state import SweepState

FIELD_MANAGER = "kubetrain-cli"
TRAININGJOBS = "trainingjobs"


class SweepNotFound(KubetrainError):
    """No Sweep of that name in the namespace."""

    exit_code = 1

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(f"sweep {name} not found in namespace {namespace} (kubetrain sweep submit -f FILE)")


def submit(rest: Rest, job: TrainingJob, namespace: str, dry_run: bool = False) -> dict[str, Any]:
    """Create or update the Sweep of a kubetrain.yaml with a sweep section (server-side apply)."""
    body = sweep_resource(job, namespace)
    query = {"fieldManager": FIELD_MANAGER, "force": "true", **({"dryRun": "All"} if dry_run else {})}
    return rest.json("PATCH", path_of(GROUP, VERSION, PLURAL, namespace, job.metadata.name), query, body,
                    content_type="application/apply-patch+yaml")


def read(rest: Rest, namespace: str, name: str) -> tuple[TrainingJob, SweepState, dict[str, Any]]:
    """The Sweep's job (with its sweep section), its search state and its whole object."""
    try:
        obj = rest.get(path_of(GROUP, VERSION, PLURAL, namespace, name))
    except NotFound:
        raise SweepNotFound(namespace, name) from None
    state = (obj.get("status") or {}).get("state")
    return load_sweep(obj), SweepState.from_dict(state) if state else SweepState(), obj


def trials(rest: Rest, namespace: str, name: str) -> list[dict[str, Any]]:
    """The sweep's trials' TrainingJobs."""
    found = rest.get(path_of(GROUP, VERSION, TRAININGJOBS, namespace), labelSelector=f"{SWEEP_LABEL}={name}")
    return list(found.get("items") or [])


def stop(rest: Rest, namespace: str, name: str, timeout: float = 300.0) -> list[str]:
    """Start no more trials (spec.stop) and delete every trial's TrainingJob; wait until they are gone (with
    their pods: foreground deletion). Returns the deleted trials' names."""
    try:
        rest.json("PATCH", path_of(GROUP, VERSION, PLURAL, namespace, name), body={"spec": {"stop": True}},
                 content_type="application/merge-patch+json")
    except NotFound:
        raise SweepNotFound(namespace, name) from None
    names = [t["metadata"]["name"] for t in trials(rest, namespace, name)]
    for trial in names:
        with contextlib.suppress(NotFound):
            rest.request("DELETE", path_of(GROUP, VERSION, TRAININGJOBS, namespace, trial),
                        body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"})
    deadline = time.monotonic() + timeout
    while (left := trials(rest, namespace, name)) and time.monotonic() < deadline:
        time.sleep(1.0)
    if left:
        raise KubetrainError(f"sweep {name}: {len(left)} trials still deleting after {timeout:.0f}s")
    return names
