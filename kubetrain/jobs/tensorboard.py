"""`kubetrain tensorboard NAME --cluster`: a TensorBoard pod beside a running job, over its event files.

The pod is made from rank 0's pod: the same image (a spec with tracking.tensorboard gets the tensorboard
package in images from `kubetrain build`), node (a ReadWriteOnce claim mounts on one node only), security
context and pull secrets, and read-only the volume mounts that hold TENSORBOARD_LOGDIR. It is owned by the
job, so the garbage collector deletes it with the job. The command reaches it through its own port-forward
(kubetrain.kube.portforward).
"""

from __future__ import annotations

import posixpath
import time
from typing import Any

from kubetrain.errors import ClusterError
from kubetrain.jobs import pods
from kubetrain.jobs.apply import apply_configmap, with_owner
from kubetrain.jobs.targets import Target
from kubetrain.kube.errors import cluster_errors
from kubetrain.kube.objects import meta_of, status_of
from kubetrain.kube.rest import Rest, path_of
from kubetrain.kube.watch import WaitTimeout
from kubetrain.podenv import TENSORBOARD_ENV

PORT = 6006
CONTAINER = "tensorboard"
RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}


def pod_name(job: str) -> str:
    return f"{job}-tensorboard"[:63].rstrip("-.")


def logdir_of(container: dict[str, Any]) -> str | None:
    return next((str(e["value"]) for e in container.get("env") or []
                 if e.get("name") == TENSORBOARD_ENV and e.get("value")), None)


def _covers(mount: dict[str, Any], logdir: str) -> bool:
    path = posixpath.normpath(str(mount.get("mountPath") or "/"))
    return logdir == path or logdir.startswith(path.rstrip("/") + "/")


def tensorboard_pod(job: dict[str, Any], rank0: dict[str, Any], container_name: str) -> dict[str, Any]:
    """The TensorBoard pod for `job`, made from its rank 0 pod; a ClusterError when the job writes no event
    files on a volume."""
    name = str(meta_of(job).get("name"))
    spec = rank0.get("spec") or {}
    container: dict[str, Any] = next((c for c in spec.get("containers") or [] if c.get("name") == container_name),
                                     {})
    logdir = logdir_of(container)
    if logdir is None:
        raise ClusterError(f"{name}: its pods have no {TENSORBOARD_ENV}: the job sets no spec.tracking.tensorboard")
    if "://" in logdir:
        raise ClusterError(f"{name}: its event files are in {logdir}: serve them here with "
                           f"`kubetrain tensorboard --logdir {logdir}`")
    mounts = [m for m in container.get("volumeMounts") or [] if _covers(m, posixpath.normpath(logdir))]
    if not mounts:
        raise ClusterError(f"{name}: {TENSORBOARD_ENV}={logdir} is on no volume of its pods: the files went "
                           "with their containers")
    used = {m["name"] for m in mounts}
    pod_spec: dict[str, Any] = {
        "nodeName": spec.get("nodeName"),
        "restartPolicy": "Always",
        "volumes": [v for v in spec.get("volumes") or [] if v.get("name") in used],
        "containers": [{
            "name": CONTAINER, "image": container.get("image"),
            "command": ["python", "-m", "tensorboard.main", "--logdir", logdir, "--host", "0.0.0.0",
                        "--port", str(PORT)],
            "ports": [{"name": "http", "containerPort": PORT}],
            "volumeMounts": [{**m, "readOnly": True} for m in mounts],
            "resources": RESOURCES,
            **({"securityContext": container["securityContext"]} if container.get("securityContext") else {}),
            **({"env": [{"name": "TMPDIR", "value": "/tmp"}]} if _read_only_root(container) else {}),
        }],
        **{key: spec[key] for key in ("securityContext", "imagePullSecrets", "tolerations") if spec.get(key)},
    }
    if _read_only_root(container):  # TensorBoard writes to TMPDIR
        pod_spec["volumes"].append({"name": "tmp", "emptyDir": {}})
        pod_spec["containers"][0]["volumeMounts"].append({"name": "tmp", "mountPath": "/tmp"})
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": pod_name(name), "namespace": meta_of(job).get("namespace"),
                        "labels": {"app.kubernetes.io/name": "tensorboard", "kubetrain.dev/tensorboard-of": name}},
           "spec": {k: v for k, v in pod_spec.items() if v is not None}}
    return with_owner(pod, job)


def _read_only_root(container: dict[str, Any]) -> bool:
    return bool((container.get("securityContext") or {}).get("readOnlyRootFilesystem"))


def start_tensorboard(rest: Rest, target: Target, job: dict[str, Any]) -> dict[str, Any]:
    """Apply the job's TensorBoard pod (server-side apply: running it again changes nothing)."""
    namespace, name = meta_of(job).get("namespace", ""), meta_of(job).get("name", "")
    started = [r for r in pods.job_replicas(rest, target, str(namespace), str(name)) if r.node]
    if not started:
        raise ClusterError(f"{name} has no scheduled pod yet: start its TensorBoard once it runs")
    return apply_configmap(rest, tensorboard_pod(job, started[0].obj, started[0].container))


def wait_running(rest: Rest, namespace: str, name: str, timeout: float, every: float = 1.0) -> None:
    """Until the pod runs (a port-forward needs a running pod); a WaitTimeout naming its phase."""
    deadline = time.monotonic() + timeout
    phase = ""
    while time.monotonic() < deadline:
        with cluster_errors(f"get pod {name} in namespace {namespace}"):
            phase = str(status_of(rest.get(path_of("", "v1", "pods", namespace, name))).get("phase") or "")
        if phase == "Running":
            return
        if phase in ("Failed", "Succeeded"):
            raise ClusterError(f"pod {name} ended ({phase}): kubectl logs -n {namespace} {name}")
        time.sleep(every)
    raise WaitTimeout(f"timed out after {timeout:g}s waiting for pod {name} to run (phase {phase or 'unknown'}): "
                      f"kubectl describe pod -n {namespace} {name}")
