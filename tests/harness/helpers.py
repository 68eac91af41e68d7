"""Small helpers for the control-plane integration tests (kubernetes client only)."""

from __future__ import annotations

import threading
import weakref
from typing import Any

import kubernetes
from kubernetes.dynamic import DynamicClient

from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.rest import Rest
from tests.testenv.polling import wait_for  # noqa: F401  (re-exported for the harness tests)

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
GPU = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
FIELD_MANAGER = "kubetrain-tests"


def replica(gpus: int, tolerate: bool, annotations: dict[str, str] | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "pytorch",  # the operator looks for this container name
        "image": "ghcr.io/example/train:1.0",
        "command": ["torchrun", "train.py"],
        "resources": {"limits": {GPU: str(gpus)}} if gpus else {},
    }
    spec: dict[str, Any] = {"containers": [container]}
    if tolerate:
        spec["tolerations"] = [GPU_TOLERATION]
    if gpus:
        spec["nodeSelector"] = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    return {"metadata": {"annotations": annotations or {}}, "spec": spec}


def pytorchjob(
    name: str,
    namespace: str,
    *,
    workers: int = 2,
    gpus: int = 8,
    tolerate: bool = True,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A PyTorchJob with one Master and `workers` Workers, each on `gpus` GPUs."""

    def rs(n: int) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "Never", "template": replica(gpus, tolerate, annotations)}

    specs = {"Master": rs(1)}
    if workers:
        specs["Worker"] = rs(workers)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "kubetrain"},
        },
        "spec": {
            "nprocPerNode": str(gpus or 1),
            "runPolicy": {"cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": specs,
        },
    }


def server_side_apply(client: kubernetes.client.ApiClient, manifest: dict[str, Any], dry_run: bool = False) -> Any:
    """`kubectl apply --server-side [--dry-run=server]` through the dynamic client."""
    dyn = DynamicClient(client)
    resource = dyn.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
    kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "force_conflicts": True}
    if dry_run:
        kwargs["dry_run"] = "All"
    return resource.server_side_apply(
        body=manifest,
        name=manifest["metadata"]["name"],
        namespace=manifest["metadata"].get("namespace"),
        **kwargs,
    )


def get_job(client: kubernetes.client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return kubernetes.client.CustomObjectsApi(client).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )


def condition(obj: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in obj.get("status", {}).get("conditions") or [])


def job_pods(core: kubernetes.client.CoreV1Api, namespace: str, job: str) -> list[Any]:
    return core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={job}").items


def env_of(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def events_about(core: kubernetes.client.CoreV1Api, namespace: str, name: str, reason: str) -> list[Any]:
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [e for e in events if e.reason == reason]


_RESTS: weakref.WeakKeyDictionary[kubernetes.client.ApiClient, Rest] = weakref.WeakKeyDictionary()
_RESTS_LOCK = threading.Lock()


def rest_for(api: kubernetes.client.ApiClient) -> Rest:
    """kubetrain's client over the same server and credentials as the harness's kubernetes ApiClient, one per
    ApiClient: its keep-alive connections are reused (a TLS handshake per request was 40 % of the validation
    oracle's CPU in pytest)."""
    with _RESTS_LOCK:
        rest = _RESTS.get(api)
        if rest is None:
            rest = _RESTS[api] = _new_rest(api)
        return rest


def _new_rest(api: kubernetes.client.ApiClient) -> Rest:
    conf = api.configuration
    endpoint = Endpoint(server=str(conf.host).rstrip("/"), context=None, namespace=None, ca_file=conf.ssl_ca_cert,
                        insecure=not conf.verify_ssl, cert_file=conf.cert_file, key_file=conf.key_file,
                        tls_server_name=getattr(conf, "tls_server_name", None))

    def auth() -> str | None:
        value = conf.get_api_key_with_prefix("authorization")
        return str(value) if value else None

    return Rest(endpoint, auth)
