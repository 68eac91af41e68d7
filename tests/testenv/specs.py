"""Job specs for the cluster tests, written to files and rendered as `kubetrain submit` renders them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes
import yaml

from kubetrain.cli.common import render_loaded
from kubetrain.jobs.targets import PYTORCHJOB
from kubetrain.jobspec.load import load_spec
from kubetrain.kube import watch
from kubetrain.kube.connection import Connection
from tests.testenv.polling import wait_for

H100 = {"cloud": "gke", "gpuType": "nvidia-h100-80gb"}


def write_spec(directory: Path, name: str, *, nodes: int = 2, gpus: int = 8, code: bool = False,
               **spec: Any) -> Path:
    """A kubetrain.yaml for GKE H100 nodes (the harness's GPU nodes); extra keys go into spec."""
    body: dict[str, Any] = {"image": "ghcr.io/example/train:1.0", "command": ["python", "train.py"],
                            "nodes": nodes, "gpusPerNode": gpus, **({"placement": dict(H100)} if gpus else {}), **spec}
    if code:
        src = directory / "src"
        src.mkdir(parents=True, exist_ok=True)
        (src / "train.py").write_text("print('training')\n")
        body["code"] = {"path": "./src"}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
                                    "metadata": {"name": name}, "spec": body}))
    return path


def render(path: Path, namespace: str, target: str | None = None) -> list[dict[str, Any]]:
    return render_loaded(load_spec(str(path)), target=target, namespace=namespace)


def watch_until(fn: Any, timeout: float = 30) -> Any:
    """Poll `fn` every 0.2 s until it returns something truthy; fail the test after `timeout` seconds."""
    return wait_for(fn, getattr(fn, "__name__", "the condition"), timeout)


def typed(conn: Connection) -> kubernetes.client.ApiClient:
    """The kubernetes package's client over the same kubeconfig, for the tests' own reads (kubetrain has none)."""
    return kubernetes.config.new_client_from_config(config_file=conn.rest.endpoint.kubeconfig, context=conn.context)


def pods_by_phase(conn: Connection, namespace: str, job: str, count: int, phase: str = "Running",
                  owner: str | None = None) -> list[dict[str, Any]]:
    """Watch the job's pods until `count` of them are in `phase` (with `owner`: of the job with that uid)."""
    def check(cache: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]] | None:
        matching = [p for p in cache.values() if (p.get("status") or {}).get("phase") == phase
                    and (owner is None or any(r.get("uid") == owner for r in p["metadata"].get("ownerReferences")
                                              or []))]
        return matching if len(matching) >= count else None

    return watch.wait_for(kubernetes.client.CoreV1Api(typed(conn)).list_namespaced_pod, check, timeout=60,
                          what=f"{count} {phase} pods of {job}", namespace=namespace,
                          label_selector=PYTORCHJOB.pod_selector(job))
