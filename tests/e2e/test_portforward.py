"""Port-forward on the one client (kubetrain.kube.portforward) through the real API server and kubelet
(containerd dials the port in the pod's network namespace): an HTTP GET through the local listener reaches a
server that listens on the pod's loopback only, and a port nobody listens on is the kubelet's one line."""

from __future__ import annotations

import threading
import urllib.request
from typing import Any

import kubernetes
import pytest

from kubetrain.kube.connection import connect
from kubetrain.kube.portforward import Forwarder
from tests.testenv.polling import wait_for

from .conftest import PLACEMENT, Cli

pytestmark = pytest.mark.slow


def test_http_through_the_port_forward(cli: Cli, image: str, real_node: Any, namespace: str) -> None:
    core = kubernetes.client.CoreV1Api(real_node.cp.api_client())
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
           "spec": {"containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                                    "command": ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1",
                                                "--directory", "/etc"],
                                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}],
                    "terminationGracePeriodSeconds": 0, **PLACEMENT}}
    core.create_namespaced_pod(namespace, pod)
    wait_for(lambda: core.read_namespaced_pod("web", namespace).status.phase == "Running", "pod Running", 120)
    rest = connect(kubeconfig=str(cli.kubeconfig)).rest
    reports: list[str] = []
    served = Forwarder(rest, namespace, "web", 8000, report=reports.append)
    closed = Forwarder(rest, namespace, "web", 8001, report=reports.append)
    for forwarder in (served, closed):
        forwarder.check()
        threading.Thread(target=forwarder.serve_forever, daemon=True).start()
    try:
        host, port = served.address

        def get() -> bytes:
            with urllib.request.urlopen(f"http://{host}:{port}/hostname", timeout=30) as answer:
                return bytes(answer.read())

        # The server may not listen yet when the pod runs: the first connections meet a refused port.
        body = wait_for(get, "a GET through the port-forward", 60, 0.5, tolerate=(OSError,))
        pod_name = body.decode().strip()
        assert pod_name == "web", body
        assert get() == body  # a second connection: a second WebSocket
        reports.clear()
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://{closed.address[0]}:{closed.address[1]}/", timeout=30)
        wait_for(lambda: reports, "the kubelet's error for port 8001", 30, 0.2)
        assert len(reports) == 1 and reports[0].startswith(f"{namespace}/web:8001: "), reports
        assert "8001" in reports[0].split(": ", 1)[1] and "refused" in reports[0], reports
    finally:
        served.close()
        closed.close()
