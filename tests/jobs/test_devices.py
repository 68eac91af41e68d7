"""DRA on a cluster, pure: devices from ResourceSlices, which a request matches (CEL selectors, as the
scheduler evaluates them), what claims hold, and the one-line explanations of status and preflight."""

from __future__ import annotations

from typing import Any

from kubetrain.checks import OK, WARN
from kubetrain.cluster.doctor import mechanism_check
from kubetrain.cluster.preflight import dra_demand
from kubetrain.jobs import devices
from kubetrain.jobs.devices import Request

DRIVER = "gpu.example.com"


def slice_(node: str, count: int, model: str = "A100", memory: str = "80Gi") -> dict[str, Any]:
    return {"spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": model},
                                                                      "index": {"int": i}},
                                  "capacity": {"memory": {"value": memory}}} for i in range(count)]}}


def device_class(selectors: list[str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {"expression": e}} for e in
                                                                  (selectors or [f'device.driver == "{DRIVER}"'])]}}


def claim(name: str, node: str, held: list[int], count: int = 2) -> dict[str, Any]:
    results = [{"driver": DRIVER, "pool": node, "device": f"gpu-{i}", "request": "gpus"} for i in held]
    return {"metadata": {"name": name, "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER,
                                                                             "count": count}}]}},
            "status": {"allocation": {"devices": {"results": results}}} if held else {}}


def cluster(claims: list[dict[str, Any]] | None = None) -> devices.Inventory:
    slices = [slice_("a", 4), slice_("b", 4, model="H100", memory="40Gi")]
    return devices.inventory([device_class()], slices, claims or [])


def test_selectors_over_attributes_and_capacity() -> None:
    inventory = cluster()
    big = Request(DRIVER, 1, ('device.capacity["gpu.example.com"].memory.compareTo(quantity("80Gi")) >= 0',))
    assert {d.node for d in devices.match(inventory, big).devices} == {"a"}
    h100 = Request(DRIVER, 1, ('device.attributes["gpu.example.com"].model.startsWith("H")',))
    assert len(devices.match(inventory, h100).devices) == 4
    missing = Request(DRIVER, 1, ('device.attributes["gpu.example.com"].nope == 1',))  # an error: no match
    assert devices.match(inventory, missing).devices == []


def test_a_selector_that_matches_nothing_is_named() -> None:
    request = Request(DRIVER, 2, ('device.attributes["gpu.example.com"].model == "B200"',))
    line = devices.shortfall(cluster(), request, 1, "ResourceClaim c")
    assert line == ('ResourceClaim c: selector `device.attributes["gpu.example.com"].model == "B200"` matches none '
                    "of the 8 device(s) of DeviceClass gpu.example.com")


def test_a_missing_device_class() -> None:
    line = devices.shortfall(cluster(), Request("other.example.com", 1), 1, "ResourceClaim c")
    assert line == "ResourceClaim c: DeviceClass other.example.com does not exist (kubectl get deviceclasses)"


def test_free_devices_count_per_node_and_claims_hold_devices() -> None:
    inventory = cluster([claim("held", "a", [0, 1, 2])])
    request = Request(DRIVER, 2)
    assert devices.pods_that_fit(inventory.free(devices.match(inventory, request).devices), 2) == 2  # a:1 b:4
    assert devices.shortfall(inventory, request, 2, "c") is None
    assert devices.shortfall(inventory, request, 3, "ResourceClaim c") == (
        "ResourceClaim c: needs 2 device(s) of DeviceClass gpu.example.com per pod for 3 pod(s); 5 of 8 matching "
        "device(s) are free, enough for 2 pod(s)")
    assert devices.shortfall(inventory, Request(DRIVER, 5), 1, "c") == (
        "c: needs 5 device(s) of DeviceClass gpu.example.com on one node, but no node has more than 4 matching "
        "device(s) (8 in all)")


def test_claim_hints_name_the_unallocated_claims_of_pending_pods() -> None:
    pending = [{"spec": {"resourceClaims": [{"name": "gpus"}]}, "status": {
        "phase": "Pending", "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": f"j-worker-{i}-gpus"}]}}
        for i in range(3)]
    claims = [claim(f"j-worker-{i}-gpus", "a", [], count=4) for i in range(3)]
    hints = devices.claim_hints(pending, claims, cluster([claim("other", "b", [0])]))
    assert hints == ["ResourceClaim j-worker-0-gpus, j-worker-1-gpus, j-worker-2-gpus: needs 4 device(s) of "
                     "DeviceClass gpu.example.com per pod for 3 pod(s); 7 of 8 matching device(s) are free, enough "
                     "for 1 pod(s)"]


def test_allocated_devices_of_a_claim() -> None:
    assert devices.allocated_devices(claim("c", "a", [0, 3])) == ["gpu.example.com/a/gpu-0", "gpu.example.com/a/gpu-3"]


def test_doctor_names_the_mechanism() -> None:
    plugin_node = {"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    both = mechanism_check([plugin_node], cluster([claim("c", "a", [0])]))
    assert both.status == OK and both.message == (
        "GPUs through the device plugin (8 nvidia.com/gpu on 1 node(s)) and DRA (DeviceClasses gpu.example.com; "
        "8 device(s) on 2 node(s), 7 free)")
    assert mechanism_check([], cluster()).message.endswith("free) only")
    assert mechanism_check([plugin_node], devices.inventory([device_class()], [], [])).status == WARN


def test_preflight_demand_sums_replicas_per_request() -> None:
    template = {"metadata": {"name": "j-worker-gpus"}, "spec": {"spec": claim("x", "a", [])["spec"]}}
    master = {"metadata": {"name": "j-master-gpus"}, "spec": template["spec"]}
    job = {"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "template": {"spec": {"resourceClaims": [
            {"name": "gpus", "resourceClaimTemplateName": "j-master-gpus"}]}}},
        "Worker": {"replicas": 3, "template": {"spec": {"resourceClaims": [
            {"name": "gpus", "resourceClaimTemplateName": "j-worker-gpus"}]}}}}}}
    assert dra_demand(job, [master, template]) == {Request(DRIVER, 2): (4, "j-master-gpus")}
