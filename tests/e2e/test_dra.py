"""GPUs through Dynamic Resource Allocation on the real node, with a real DRA driver: the DRA example
driver's kubelet plugin publishes 2 simulated GPUs for the real node; a digits job with `gpus.via: dra` gets
its claims allocated by the scheduler and prepared by the driver (a CDI spec per claim, in the dir the node's
containerd reads CDI specs from), containerd injects the devices into the containers, and the pods train. A
request for more devices than the node has is refused by preflight; submitted anyway, it stays Pending, and
`kubetrain status` names the claim and why."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain import jobs
from kubetrain.jobs import devices
from kubetrain.jobs.targets import PYTORCHJOB
from kubetrain.kube.connection import connect
from kubetrain.kube.rest import Rest
from kubetrain.metrics import parse_metrics_line
from tests.testenv import node as real
from tests.testenv.binaries import MissingBinaries
from tests.testenv.dradriver import DRIVER, DraDriver
from tests.testenv.plugin import unavailable
from tests.testenv.polling import wait_for

from .conftest import Cli

pytestmark = [pytest.mark.slow, pytest.mark.torch]
ACCURACY = 0.97
DEVICES = 2  # what the driver publishes for the real node


@pytest.fixture(scope="module")
def dra_driver(real_node: real.RealNode) -> Iterator[DraDriver]:
    try:
        driver = DraDriver(real_node.cp, real_node.dir, real.NODE_NAME, real_node.dir / "kubelet", devices=DEVICES,
                           cdi_root=real_node.cdi_dir)
    except MissingBinaries as exc:
        unavailable(str(exc))
        raise
    with driver.running():
        yield driver


@pytest.fixture
def rest(dra_driver: DraDriver) -> Rest:
    return connect(kubeconfig=str(dra_driver.cp.kubeconfig)).rest


def _dra_spec(project: Path, name: str, nodes: int, count: int) -> Path:
    spec = yaml.safe_load((project / "kubetrain.yaml").read_text())
    spec["metadata"]["name"] = name
    spec["spec"]["nodes"] = nodes
    spec["spec"]["gpus"] = {"via": "dra", "deviceClass": DRIVER, "count": count}
    path = project / f"kubetrain-{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _container_env(node: real.RealNode, rest: Rest, namespace: str, job: str) -> dict[str, dict[str, str]] | None:
    """Each pod's training container's environment as containerd gave it to runc (the OCI spec's process.env),
    once every pod of the job has its container."""
    items = rest.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=PYTORCHJOB.pod_selector(job))["items"]
    found: dict[str, dict[str, str]] = {}
    for pod in items:
        ids = [s.get("containerID", "") for s in (pod.get("status") or {}).get("containerStatuses") or []]
        if not ids or not ids[0]:
            return None
        info = node.ctr("containers", "info", ids[0].removeprefix("containerd://"), timeout=30)
        if info.returncode != 0:
            return None
        env: list[str] = json.loads(info.stdout)["Spec"]["process"]["env"]
        found[pod["metadata"]["name"]] = dict(e.partition("=")[::2] for e in env)
    return found if len(found) == 2 else None


def test_a_dra_digits_job_gets_prepared_devices_and_trains(cli: Cli, image: str, project: Path, namespace: str,
                                                          claim: Path, real_node: real.RealNode, rest: Rest,
                                                          dra_driver: DraDriver) -> None:
    cli("submit", "-f", str(_dra_spec(project, "digits-dra", 2, 1)), "-n", namespace, "--image", image)

    def prepared() -> list[list[str]] | None:
        claims = devices.job_claims(rest, namespace, "kubetrain.dev/job=digits-dra")
        allocated = [devices.allocated_devices(c) for c in claims]
        return allocated if len(allocated) == 2 and all(allocated) and len(dra_driver.cdi_specs()) >= 3 else None

    allocated = wait_for(prepared, "both claims allocated and prepared by the driver", 120)
    assert sorted(d for found in allocated for d in found) == [f"{DRIVER}/{real.NODE_NAME}/gpu-0",
                                                              f"{DRIVER}/{real.NODE_NAME}/gpu-1"]
    envs = wait_for(lambda: _container_env(real_node, rest, namespace, "digits-dra"),
                    "both pods' containers created", 300)
    injected: dict[str, str] = {}
    for env in envs.values():
        assert env.get("DRA_RESOURCE_DRIVER_NAME") == DRIVER, env
        assert env.get("KUBERNETES_NODE_NAME") == real.NODE_NAME, env
        gpus = {k: v for k, v in env.items() if k.startswith("GPU_DEVICE_") and k.count("_") == 2}
        assert len(gpus) == 1, env  # one device per pod, the one its claim holds
        injected.update(gpus)
    assert injected == {"GPU_DEVICE_0": "gpu-0", "GPU_DEVICE_1": "gpu-1"}

    assert jobs.wait_finished(rest, PYTORCHJOB, namespace, "digits-dra", timeout=600) == "Succeeded", \
        cli("status", "digits-dra", "-n", namespace, check=False).stdout
    logged = cli("logs", "digits-dra", "-n", namespace).stdout
    evals = [r for r in (parse_metrics_line(line) for line in logged.splitlines())
             if r is not None and r.get("kind") == "eval"]
    assert evals and float(str(evals[-1]["eval_accuracy"])) >= ACCURACY, logged[-2000:]


def test_a_request_beyond_the_nodes_devices_stays_pending_and_status_names_the_claim(
        cli: Cli, image: str, project: Path, namespace: str, claim: Path, rest: Rest, dra_driver: DraDriver) -> None:
    spec = str(_dra_spec(project, "digits-dra-big", 1, DEVICES + 1))
    refused = cli("submit", "-f", spec, "-n", namespace, "--image", image, check=False)
    shortfall = (f"needs {DEVICES + 1} device(s) of DeviceClass {DRIVER} on one node, but no node has more than "
                 f"{DEVICES} matching device(s) ({DEVICES} in all)")
    assert refused.returncode != 0
    assert f"✗ fit: can never fit: ResourceClaimTemplate digits-dra-big-master-gpus: {shortfall}" in refused.stderr
    cli("submit", "-f", spec, "-n", namespace, "--image", image, "--skip-preflight=fit")  # as one who insists

    def explained() -> list[str] | None:
        out = cli("status", "digits-dra-big", "-n", namespace).stdout
        hints = (line.strip().removeprefix("→ ") for line in out.split("\nHints:\n", 1)[-1].splitlines())
        return [hint for hint in hints if hint.startswith("ResourceClaim digits-dra-big-")] or None

    line, = wait_for(explained, "status to explain the pending claim", 120)
    claims: list[dict[str, Any]] = devices.job_claims(rest, namespace, "kubetrain.dev/job=digits-dra-big")
    assert [c["metadata"]["name"] for c in claims] == [line.split()[1].rstrip(":")], line
    assert not claims[0].get("status", {}).get("allocation"), claims[0]
    assert line.endswith(shortfall), line
    pods = rest.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=PYTORCHJOB.pod_selector("digits-dra-big"))
    assert [p["status"]["phase"] for p in pods["items"]] == ["Pending"]
