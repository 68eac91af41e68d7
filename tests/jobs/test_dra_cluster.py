"""GPUs through Dynamic Resource Allocation on the real control plane: a DeviceClass and ResourceSlices
created through the API (as a DRA driver would publish them) for two kwok GPU nodes; the real
resourceclaim controller makes the claims from kubetrain's templates and the real kube-scheduler allocates
them. kwok runs the pods; no driver prepares the devices here (tests/e2e proves that part where it can)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.checks import FAIL, OK
from kubetrain.cluster import doctor, preflight
from kubetrain.jobs import apply, devices, gpu, pods, status
from kubetrain.jobs.targets import PYTORCHJOB
from kubetrain.kube.connection import Connection, connect
from tests.testenv.binaries import MissingBinaries
from tests.testenv.dradriver import DRIVER as EXAMPLE_DRIVER
from tests.testenv.dradriver import FAKE_DRIVER, DraDriver, fake_devices
from tests.testenv.plugin import unavailable
from tests.testenv.polling import wait_for
from tests.testenv.specs import render, write_spec

pytestmark = pytest.mark.controlplane

DRIVER = FAKE_DRIVER


@pytest.fixture(scope="module")
def dra_devices(controlplane: Any) -> Iterator[None]:
    """Node gpu-node-0: 4 devices of 80Gi, gpu-node-1: 4 of 40Gi, all of DeviceClass gpu.kubetrain.test."""
    with fake_devices(connect(kubeconfig=str(controlplane.kubeconfig)).rest,
                      {"gpu-node-0": "80Gi", "gpu-node-1": "40Gi"}):
        yield


@pytest.fixture
def conn(controlplane: Any, dra_devices: None) -> Connection:
    return connect(kubeconfig=str(controlplane.kubeconfig))


@pytest.fixture(scope="module")
def example_driver(controlplane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DraDriver]:
    """The DRA example driver's kubelet plugin for kwok node gpu-node-2: it publishes 2 devices there (no
    kubelet calls it, so nothing prepares them; tests/e2e/test_dra.py runs it beside the real kubelet)."""
    workdir = tmp_path_factory.mktemp("dra-example")
    try:
        driver = DraDriver(controlplane, workdir, "gpu-node-2", workdir / "kubelet", devices=2)
    except MissingBinaries as exc:
        unavailable(str(exc))
        raise
    with driver.running():
        yield driver


def _spec(tmp_path: Path, name: str, count: int, *selectors: str, device_class: str = DRIVER) -> Path:
    path = write_spec(tmp_path, name, nodes=2, gpus=count)
    body = yaml.safe_load(path.read_text())
    body["spec"]["gpus"] = {"via": "dra", "deviceClass": device_class, "selectors": list(selectors)}
    path.write_text(yaml.safe_dump(body))
    return path


def _devices_free(conn: Connection) -> None:
    """An earlier test's claims are deleted by the resourceclaim controller after its pods: wait for that."""
    def free() -> bool:
        inventory = devices.read_inventory(conn.rest)
        return not any(key[0] == DRIVER for key in inventory.held)

    wait_for(free, "every device of the earlier tests' claims to be released", timeout=60)


def _pods(conn: Connection, namespace: str, job: str, phases: list[str]) -> list[dict[str, Any]]:
    def seen() -> list[dict[str, Any]] | None:
        items = conn.rest.get(f"/api/v1/namespaces/{namespace}/pods",
                              labelSelector=PYTORCHJOB.pod_selector(job)).get("items") or []
        found = sorted(str((p.get("status") or {}).get("phase")) for p in items)
        return list(items) if found == sorted(phases) else None

    return wait_for(seen, f"pods of {job}: {phases}", timeout=60)


def test_a_dra_job_gets_its_claims_allocated_on_the_nodes_that_have_the_devices(conn: Connection, namespace: str,
                                                                                tmp_path: Path) -> None:
    _devices_free(conn)
    objects = render(_spec(tmp_path, "dra-fits", 3), namespace)
    fit = preflight.fit_check(conn.rest, PYTORCHJOB, objects, namespace)
    assert fit.status == OK, fit.line()
    assert fit.message == f"2 pod(s) × 3 {DRIVER}: 8 of 8 matching device(s) free"
    apply.submit(conn.rest, PYTORCHJOB, objects)
    running = _pods(conn, namespace, "dra-fits", ["Running", "Running"])
    assert {p["spec"]["nodeName"] for p in running} == {"gpu-node-0", "gpu-node-1"}  # 3 of 4 each: one per node

    replicas = pods.job_replicas(conn.rest, PYTORCHJOB, namespace, "dra-fits")
    allocated = gpu.claimed_devices(conn.rest, namespace, "dra-fits", replicas)
    for replica in replicas:
        assert len(allocated[replica.pod]) == 3
        assert all(d.startswith(f"{DRIVER}/{replica.node}/gpu-") for d in allocated[replica.pod])

    mechanism = doctor.mechanism_check([], doctor.read_dra(conn.rest))
    assert f"DRA (DeviceClasses {DRIVER}" in mechanism.message and "8 device(s) on 2 node(s), 2 free" in \
        mechanism.message, mechanism.message


def test_a_request_beyond_the_slices_stays_pending_and_status_names_the_claim(conn: Connection, namespace: str,
                                                                              tmp_path: Path) -> None:
    big = 'device.capacity["gpu.kubetrain.test"].memory.compareTo(quantity("80Gi")) >= 0'
    _devices_free(conn)
    objects = render(_spec(tmp_path, "dra-big", 4, big), namespace)
    fit = preflight.fit_check(conn.rest, PYTORCHJOB, objects, namespace)
    assert fit.status == FAIL and "enough for 1 pod(s)" in fit.message, fit.line()
    apply.submit(conn.rest, PYTORCHJOB, objects)
    _pods(conn, namespace, "dra-big", ["Pending", "Running"])

    def explained() -> list[str] | None:
        lines = [h for h in status.job_status(conn.rest, [PYTORCHJOB], namespace, "dra-big").hints
                 if h.startswith("ResourceClaim dra-big-")]
        return lines or None

    line, = wait_for(explained, "status to explain the pending claim", timeout=30)
    assert line.endswith(f"needs 4 device(s) of DeviceClass {DRIVER} per pod for 1 pod(s); 0 of 4 matching "
                         "device(s) are free, enough for 0 pod(s)"), line


def test_preflight_names_a_selector_that_matches_no_device(conn: Connection, namespace: str, tmp_path: Path) -> None:
    objects = render(_spec(tmp_path, "dra-none", 1, 'device.attributes["gpu.kubetrain.test"].model == "B200"'),
                     namespace)
    fit = preflight.fit_check(conn.rest, PYTORCHJOB, objects, namespace)
    assert fit.status == FAIL, fit.line()
    assert 'selector `device.attributes["gpu.kubetrain.test"].model == "B200"` matches none of the 8 device(s)' \
        in fit.message


def test_the_rendered_objects_pass_a_server_dry_run(conn: Connection, namespace: str, tmp_path: Path) -> None:
    objects = render(_spec(tmp_path, "dra-dry", 2, 'device.attributes["gpu.kubetrain.test"].model == "KT100"'),
                     namespace)
    result = apply.submit(conn.rest, PYTORCHJOB, objects, dry_run="server")
    assert [o["kind"] for o in result.objects] == ["ResourceClaimTemplate", "ResourceClaimTemplate", "PyTorchJob"]


def test_the_example_drivers_devices_go_to_a_dra_job(conn: Connection, namespace: str, tmp_path: Path,
                                                     example_driver: DraDriver) -> None:
    """The devices a real DRA driver publishes (not hand-written slices) are matched, fitted and allocated."""
    objects = render(_spec(tmp_path, "dra-example", 1, device_class=EXAMPLE_DRIVER), namespace)
    fit = preflight.fit_check(conn.rest, PYTORCHJOB, objects, namespace)
    assert fit.message == f"2 pod(s) × 1 {EXAMPLE_DRIVER}: 2 of 2 matching device(s) free", fit.line()
    apply.submit(conn.rest, PYTORCHJOB, objects)
    running = _pods(conn, namespace, "dra-example", ["Running", "Running"])
    assert {p["spec"]["nodeName"] for p in running} == {"gpu-node-2"}
    replicas = pods.job_replicas(conn.rest, PYTORCHJOB, namespace, "dra-example")
    allocated = sorted(d for found in gpu.claimed_devices(conn.rest, namespace, "dra-example", replicas).values()
                       for d in found)
    assert allocated == [f"{EXAMPLE_DRIVER}/gpu-node-2/gpu-0", f"{EXAMPLE_DRIVER}/gpu-node-2/gpu-1"]
