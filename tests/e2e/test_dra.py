"""GPUs through Dynamic Resource Allocation on the real node, with a real DRA driver: the DRA example
driver's kubelet plugin publishes simulated GPUs; a digits job with `gpus.via: dra` gets its claims
allocated by the scheduler and prepared by the driver (a CDI spec per claim), and its pods train.

The node's containerd (Debian's 1.6.20) has no CDI support (containerd 1.7 added it), so the devices the driver
describes are not injected into the containers; the test asserts what the kubelet and the driver do, and the
training, not the device inside the pod."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubetrain.jobs import crud as jobs
from kubetrain.jobs import devices
from kubetrain.jobs.targets import PYTORCHJOB
from kubetrain.kube.connection import connect
from kubetrain.metrics import parse_metrics_line
from tests.testenv import node as real
from tests.testenv.binaries import MissingBinaries
from tests.testenv.dradriver import DRIVER, DraDriver
from tests.testenv.plugin import unavailable
from tests.testenv.polling import wait_for

from .conftest import Cli

pytestmark = [pytest.mark.slow, pytest.mark.torch]
ACCURACY = 0.97


@pytest.fixture(scope="module")
def dra_driver(real_node: real.RealNode) -> Iterator[DraDriver]:
    try:
        driver = DraDriver(real_node.cp, real_node.dir, real.NODE_NAME, real_node.dir / "kubelet", devices=2)
    except MissingBinaries as exc:
        unavailable(str(exc))
        raise
    driver.start()
    try:
        yield driver
    finally:
        driver.stop()


def test_a_dra_digits_job_gets_prepared_devices_and_trains(cli: Cli, image: str, project: Path, namespace: str,
                                                          claim: Path, dra_driver: DraDriver) -> None:
    spec = yaml.safe_load((project / "kubetrain.yaml").read_text())
    spec["metadata"]["name"] = "digits-dra"
    spec["spec"]["gpusPerNode"] = 1
    spec["spec"]["gpus"] = {"via": "dra", "deviceClass": DRIVER}
    path = project / "kubetrain-dra.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    cli("submit", "-f", str(path), "-n", namespace, "--image", image)

    rest = connect(kubeconfig=str(dra_driver.cp.kubeconfig)).rest

    def prepared() -> list[list[str]] | None:
        claims = devices.job_claims(rest, namespace, "kubetrain.dev/job=digits-dra")
        allocated = [devices.allocated_devices(c) for c in claims]
        return allocated if len(allocated) == 2 and all(allocated) and len(dra_driver.cdi_specs()) >= 2 else None

    allocated = wait_for(prepared, "both claims allocated and prepared by the driver", 120)
    assert sorted(d for found in allocated for d in found) == [f"{DRIVER}/{real.NODE_NAME}/gpu-0",
                                                              f"{DRIVER}/{real.NODE_NAME}/gpu-1"]
    assert jobs.wait_finished(rest, PYTORCHJOB, namespace, "digits-dra", timeout=600) == "Succeeded", \
        cli("status", "digits-dra", "-n", namespace, check=False).stdout
    logged = cli("logs", "digits-dra", "-n", namespace).stdout
    evals = [r for r in (parse_metrics_line(line) for line in logged.splitlines())
             if r is not None and r.get("kind") == "eval"]
    assert evals and float(str(evals[-1]["eval_accuracy"])) >= ACCURACY, logged[-2000:]

