"""The controller as its own process, under its ServiceAccount's token and exactly the manifests' RBAC."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from kubernetes.client.exceptions import ApiException

from kubetrain.controller.install import apply_all, objects_for
from tests.harness.helpers import rest_for
from tests.testenv.controlplane import established
from tests.testenv.polling import wait_for

SA_NAMESPACE, SA_NAME = "kubetrain-system", "kubetrain-controller"
GROUP, VERSION, PLURAL = "kubetrain.dev", "v1alpha1", "trainingjobs"


def install(admin: kubernetes.client.ApiClient) -> None:
    """Everything `kubetrain controller install` applies except the Deployment (no real kubelet here)."""
    apply_all(rest_for(admin), [o for o in objects_for() if o["kind"] != "Deployment"])
    ext = kubernetes.client.ApiextensionsV1Api(admin)
    for plural in (PLURAL, "sweeps"):
        wait_for(lambda: established(ext.read_custom_resource_definition(f"{plural}.{GROUP}")),  # noqa: B023
                 f"the {plural} CRD to be Established", 60)


def sa_kubeconfig(admin: kubernetes.client.ApiClient, admin_kubeconfig: Path, path: Path) -> Path:
    """A kubeconfig holding a TokenRequest token of the controller's ServiceAccount."""
    core = kubernetes.client.CoreV1Api(admin)
    request = {"spec": {"expirationSeconds": 7200}}
    token = core.create_namespaced_service_account_token(SA_NAME, SA_NAMESPACE, request).status.token
    admin_cfg = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin_cfg["clusters"][0]["cluster"]
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
           "clusters": [{"name": "c", "cluster": cluster}],
           "users": [{"name": "sa", "user": {"token": token}}],
           "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}]}
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    assert base64.b64decode(token.split(".")[1] + "==")  # a JWT, not admin credentials
    return path


class Operator:
    """`kubetrain controller run` as a child process; its log is kept for failure messages."""

    def __init__(self, kubeconfig: Path, log: Path, *args: str, name: str = "op") -> None:
        self.log = log
        argv = [sys.executable, "-m", "kubetrain", "controller", "run", "--kubeconfig", str(kubeconfig),
                "--lease-namespace", SA_NAMESPACE, "--probe-port", "0", *args]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["HOSTNAME"] = name
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.proc.returncode)


def namespaced_operator(controlplane: Any, namespace: str, tmp_path: Path, *flags: str) -> Operator:
    """The controller as its own process under the manifests' RBAC (a ServiceAccount's kubeconfig), watching
    `namespace` with a Lease of its own."""
    admin = controlplane.api_client()
    install(admin)
    config = sa_kubeconfig(admin, controlplane.kubeconfig, tmp_path / "sa.kubeconfig")
    return Operator(config, tmp_path / "controller.log", "--watch-namespace", namespace, "--lease-name",
                    f"lease-{namespace}", "--lease-duration", "4", *flags)


def training_job(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    body = {"image": "ghcr.io/example/train:1.0", "command": ["python", "train.py"], "nodes": 2,
            "resources": {"cpu": "100m", "memory": "64Mi"}, **spec}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": body}


def custom(k8s: Any) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(k8s)


def get(k8s: Any, group: str, version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return custom(k8s).get_namespaced_custom_object(group, version, namespace, plural, name)  # type: ignore
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def tj(k8s: Any, namespace: str, name: str) -> dict[str, Any] | None:
    return get(k8s, GROUP, VERSION, PLURAL, namespace, name)


def pytorchjob(k8s: Any, namespace: str, name: str) -> dict[str, Any] | None:
    return get(k8s, "kubeflow.org", "v1", "pytorchjobs", namespace, name)


def create(k8s: Any, body: dict[str, Any]) -> dict[str, Any]:
    ns = body["metadata"]["namespace"]
    return custom(k8s).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)  # type: ignore


def phase_is(k8s: Any, namespace: str, name: str, phase: str) -> dict[str, Any] | None:
    obj = tj(k8s, namespace, name)
    return obj if obj and (obj.get("status") or {}).get("phase") == phase else None


def cond(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)
