"""The controller deployed the documented way,, on the real node.

Its image is built from images/Dockerfile.controller with `BASE_IMAGE` set to the suite's local Debian python
image (no registry is reachable here; pip reaches PyPI through the host's trust store, mounted into the build)
and imported into the node's containerd. `kubetrain controller install --image` applies the CRD, namespace,
ServiceAccount, RBAC and Deployment (two replicas, leader election). The test cluster's overlay on the
Deployment is what a kustomize overlay for this cluster would carry: the real node's nodeSelector and
toleration, and a way to the API server, because the test node has no kube-proxy (Service IPs lead nowhere)
and the API server listens on loopback only: a TCP forwarder on the node's gateway address, which the pods
reach by the name the serving certificate holds (hostAliases: kubernetes.default.svc), named by
KUBERNETES_SERVICE_HOST/PORT as the kubelet would. The pods authenticate with their ServiceAccount's projected
token (the in-cluster config), pass their probes on the pod IP, one takes the Lease, and it reconciles a
TrainingJob whose pods train to Succeeded; `kubetrain controller uninstall` removes the controller.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from tests.controller.operator_env import create, phase_is, pytorchjob, tj
from tests.harness.helpers import wait_for
from tests.testenv import node as real
from tests.testenv.polling import TimedOut

from .conftest import CONTROLLER_REF as REF
from .conftest import PLACEMENT, Cli
from .test_digits import _metrics
from .test_operator import _training_job

pytestmark = [pytest.mark.slow, pytest.mark.torch]
NAMESPACE = "kubetrain-system"
NAME = "kubetrain-controller"


class Forwarder:
    """TCP from the node's gateway address to the API server's loopback port (a thread per direction)."""

    def __init__(self, host: str, target: int) -> None:
        self.server = socket.create_server((host, 0))
        self.port, self.target = int(self.server.getsockname()[1]), target
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                return
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self.server.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def _overlay(gateway: str, port: int, args: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """JSON patch of the installed Deployment for this test cluster (see the module docstring), and `args`
    appended to the controller's."""
    pod, container = "/spec/template/spec", "/spec/template/spec/containers/0"
    env = [{"name": "KUBERNETES_SERVICE_HOST", "value": "kubernetes.default.svc"},
           {"name": "KUBERNETES_SERVICE_PORT", "value": str(port)}]
    return [
        {"op": "add", "path": f"{pod}/nodeSelector", "value": PLACEMENT["nodeSelector"]},
        {"op": "add", "path": f"{pod}/tolerations", "value": PLACEMENT["tolerations"]},
        {"op": "add", "path": f"{pod}/hostAliases",
         "value": [{"ip": gateway, "hostnames": ["kubernetes.default.svc"]}]},
        *({"op": "add", "path": f"{container}/env/-", "value": item} for item in env),
        *({"op": "add", "path": f"{container}/args/-", "value": arg} for arg in args),
    ]


def _rolled_out(apps: Any, core: Any, node: str) -> list[Any] | None:
    """The Deployment's pods, all Ready on the real node, once the patched Deployment has fully rolled out."""
    dep = apps.read_namespaced_deployment(NAME, NAMESPACE)
    status, want = dep.status, dep.spec.replicas
    if (status.observed_generation != dep.metadata.generation or status.updated_replicas != want
            or status.ready_replicas != want or (status.replicas or 0) != want):
        return None
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"app.kubernetes.io/name={NAME}").items
    ready = [p for p in pods if p.spec.node_name == node and not p.metadata.deletion_timestamp and any(
        c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
    return ready if len(pods) == len(ready) == want else None


@contextlib.contextmanager
def deploy(controlplane: Any, real_node: real.RealNode, cli: Cli, controller_image: str,
           args: tuple[str, ...] = ()) -> Iterator[list[Any]]:
    """`kubetrain controller install` with this cluster's overlay (and `args` for the controller); its Ready
    pods, uninstalled after."""
    admin = controlplane.api_client()
    apps, core = kubernetes.client.AppsV1Api(admin), kubernetes.client.CoreV1Api(admin)
    # An earlier test's uninstall may still be deleting the namespace, which refuses new objects meanwhile (an
    # Active one, from the modules that run the controller as a process, is applied over).
    try:
        wait_for(lambda: _not_terminating(core), "an earlier kubetrain-system removed", 180)
    except TimedOut as exc:  # the namespace controller says why in the namespace's conditions
        conditions = [(c.type, c.reason, c.message) for c in core.read_namespace(NAMESPACE).status.conditions or []]
        raise TimedOut(f"{exc}: {conditions}") from None
    forwarder = Forwarder(real_node.gateway, controlplane.ports["apiserver"])
    installed = cli("controller", "install", "--image", controller_image).stdout.split()
    assert {"serviceaccount/kubetrain-controller", "deployment/kubetrain-controller",
            "customresourcedefinition/trainingjobs.kubetrain.dev"} <= set(installed), installed
    apps.patch_namespaced_deployment(NAME, NAMESPACE, _overlay(real_node.gateway, forwarder.port, args))
    try:
        try:
            pods = wait_for(lambda: _rolled_out(apps, core, real_node_name(core)),
                            "the controller Deployment rolled out and Ready", 300)
        except TimedOut:
            pytest.fail(f"the controller Deployment did not become Ready:\n{_describe(core)}", pytrace=False)
        yield pods
    finally:
        cli("controller", "uninstall", check=False)
        forwarder.close()


@pytest.fixture
def deployed(controlplane: Any, real_node: real.RealNode, cli: Cli, controller_image: str) -> Iterator[list[Any]]:
    with deploy(controlplane, real_node, cli, controller_image) as pods:
        yield pods


def test_deployed_controller_reconciles_a_trainingjob_to_succeeded(
        controlplane: Any, k8s: Any, cli: Cli, image: str, project: Path, namespace: str, claim: Path,
        deployed: list[Any]) -> None:
    core = kubernetes.client.CoreV1Api(k8s)
    for pod in deployed:
        container = pod.spec.containers[0]
        assert pod.spec.service_account_name == NAME and container.image == REF
        assert container.liveness_probe.http_get.path == "/healthz"
        assert container.readiness_probe.http_get.path == "/readyz"
        with urllib.request.urlopen(f"http://{pod.status.pod_ip}:8081/healthz", timeout=10) as answer:
            assert answer.status == 200  # on the pod IP, where the kubelet probes (--probe-address)
    lease = wait_for(lambda: holder(k8s), "a controller pod holding the Lease", 60)
    (leader,) = [p for p in deployed if lease.startswith(f"{p.metadata.name}_")]

    job = _training_job(project, image, namespace)
    job["metadata"]["name"] = "digits-deployed"
    job["spec"]["checkpoint"]["dir"] = "/ckpt/digits-deployed"
    job["spec"]["train"]["epochs"] = 2
    create(k8s, job)
    wait_for(lambda: pytorchjob(k8s, namespace, "digits-deployed"), "the child PyTorchJob", 120)
    done = wait_for(lambda: phase_is(k8s, namespace, "digits-deployed", "Succeeded"), "phase Succeeded", 900)
    logged = cli("logs", "digits-deployed", "-n", namespace).stdout
    assert _metrics(logged, "end") and _metrics(logged, "start")[0]["world_size"] == 2, logged[-2000:]
    assert done["status"]["progress"]["step"] == _metrics(logged, "end")[0]["step"], done["status"]
    log = core.read_namespaced_pod_log(leader.metadata.name, NAMESPACE)
    assert "leads (Lease kubetrain-system/kubetrain-controller)" in log, log[-3000:]
    for pod in deployed:  # no probe failed, nothing crashed
        assert core.read_namespaced_pod(pod.metadata.name, NAMESPACE).status.container_statuses[0].restart_count == 0

    removed = cli("controller", "uninstall").stdout.split()
    assert {"deployment/kubetrain-controller", "namespace/kubetrain-system"} <= set(removed), removed
    wait_for(lambda: _gone(lambda: core.read_namespace(NAMESPACE)), "kubetrain-system removed", 180)
    rbac = kubernetes.client.RbacAuthorizationV1Api(k8s)
    assert _gone(lambda: rbac.read_cluster_role(NAME)) and _gone(lambda: rbac.read_cluster_role_binding(NAME))
    # Without --with-crd the CRD, and so the users' TrainingJobs, stay (docs/operator.md).
    assert tj(k8s, namespace, "digits-deployed") is not None


def _describe(core: Any) -> str:
    """Pods, their container states, the namespace's Events and the controller's log, for a failure message."""
    lines = []
    for pod in core.list_namespaced_pod(NAMESPACE).items:
        lines.append(f"pod {pod.metadata.name} on {pod.spec.node_name}: {pod.status.phase} "
                     f"{[(c.type, c.status) for c in pod.status.conditions or []]}")
        for status in pod.status.container_statuses or []:
            lines.append(f"  {status.name}: ready={status.ready} restarts={status.restart_count} {status.state}")
        try:
            lines.append(core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE, tail_lines=40))
        except ApiException as exc:
            lines.append(f"  no log: {exc.reason}")
    for event in core.list_namespaced_event(NAMESPACE).items:
        lines.append(f"event {event.involved_object.kind}/{event.involved_object.name}: {event.reason}: "
                     f"{event.message}")
    return "\n".join(lines)[-8000:]


def holder(k8s: Any) -> str | None:
    lease = kubernetes.client.CoordinationV1Api(k8s).read_namespaced_lease(NAME, NAMESPACE)
    return str(lease.spec.holder_identity) if lease.spec.holder_identity else None


def real_node_name(core: Any) -> str:
    nodes = core.list_node(label_selector=f"{real.NODE_LABEL}=real").items
    return str(nodes[0].metadata.name)


def _not_terminating(core: kubernetes.client.CoreV1Api) -> bool:
    try:
        return core.read_namespace(NAMESPACE).status.phase != "Terminating"
    except ApiException as exc:
        return bool(exc.status == 404)


def _gone(read: Any) -> bool:
    try:
        read()
    except ApiException as exc:
        return bool(exc.status == 404)
    return False
