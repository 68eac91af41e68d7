"""`kubetrain delete --wait` of a job whose worker still waits for the master, on the real node: the
training-operator's init container (`sh -c '... nslookup MASTER ... sleep 2 ...'`) runs as PID 1, which
ignores SIGTERM unless it traps it, so the kubelet waited out the whole grace period before SIGKILL.
The harness's operator gets an init container template that traps TERM (tests/testenv/initimage)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from tests.testenv.polling import wait_for

from .conftest import PLACEMENT, Cli

pytestmark = pytest.mark.slow


def test_delete_wait_does_not_wait_out_the_grace_period_of_a_waiting_worker(cli: Cli, real_node: Any,
                                                                             namespace: str, tmp_path: Path) -> None:
    # The master's image does not exist (ErrImagePull): it never becomes Ready, so the worker's init
    # container keeps looking its name up.
    # A grace period far above any honest delete, so a slow machine cannot be mistaken for an ignored SIGTERM.
    body = {"image": "kubetrain.test/absent:0", "command": ["python", "train.py"], "nodes": 2,
            "resources": {"cpu": "100m", "memory": "128Mi"}, "placement": PLACEMENT,
            "terminationGracePeriodSeconds": 600}
    spec = tmp_path / "kubetrain.yaml"
    spec.write_text(yaml.safe_dump({"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
                                    "metadata": {"name": "waiting"}, "spec": body}))
    cli("submit", "-f", str(spec), "-n", namespace, "--skip-preflight")
    core = kubernetes.client.CoreV1Api(real_node.cp.api_client())

    def init_running() -> bool:
        try:
            pod = core.read_namespaced_pod("waiting-worker-0", namespace)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:  # the operator has not created it yet
                return False
            raise
        states = pod.status.init_container_statuses or []
        return bool(states and states[0].state.running)

    wait_for(init_running, "the worker's init container running", 120)
    time.sleep(3)  # a few lookups: it is in its loop
    began = time.monotonic()
    cli("delete", "waiting", "-n", namespace, "--wait", "--timeout", "450")
    took = time.monotonic() - began
    assert took < 300, f"delete --wait took {took:.1f}s of a 600 s grace period: the init container ignored SIGTERM"
