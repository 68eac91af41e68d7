"""Preflight's fit check for a DRA job against the API server: what it costs per job.

    .venv/bin/python benchmarks/bench_dra_fit.py [--nodes 200] [--devices 8] [--held 400] [--runs 7]

On the test control plane (tests/testenv): one DeviceClass, a ResourceSlice of --devices devices for each of
--nodes nodes (the slices name the nodes; the nodes need not exist for this), and --held ResourceClaims whose
allocation (status) holds devices. Then, warm (one untimed run), the median of --runs in-process runs of
`preflight.fit_check` for a 64-pod job of 4 devices per pod with two CEL selectors (product name and memory):
the whole check (the three lists, from the watch cache, plus matching every device against the class's and
the request's selectors), and the pure part alone (`devices.match` + `shortfall` over the inventory read once).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DRIVER = "gpu.bench.test"
API = "/apis/resource.k8s.io/v1"


def populate(rest: object, nodes: int, per_node: int, held: int) -> None:
    rest.json("POST", f"{API}/deviceclasses", None, {  # type: ignore[attr-defined]
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
    for n in range(nodes):
        node = f"node-{n}"
        rest.json("POST", f"{API}/resourceslices", None, {  # type: ignore[attr-defined]
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": node},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"productName": {"string": "NVIDIA H100"}},
                                  "capacity": {"memory": {"value": "80Gi"}}} for i in range(per_node)]}})
    for c in range(held):
        node, device = f"node-{c % nodes}", f"gpu-{c // nodes}"
        claim = rest.json("POST", f"{API}/namespaces/default/resourceclaims", None, {  # type: ignore[attr-defined]
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": f"held-{c}"},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER}}]}}})
        claim["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpus", "driver": DRIVER, "pool": node, "device": device}]}}}
        rest.json("PUT", f"{API}/namespaces/default/resourceclaims/held-{c}/status", None, claim)  # type: ignore


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--held", type=int, default=400)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    import yaml

    from kubetrain.cluster import preflight
    from kubetrain.jobs import devices
    from kubetrain.jobs.targets import PYTORCHJOB
    from kubetrain.kube.connection import connect
    from tests.testenv.controlplane import ControlPlane
    from tests.testenv.specs import render, write_spec

    cp = ControlPlane()
    cp.start()
    try:
        rest = connect(kubeconfig=str(cp.kubeconfig)).rest
        began = time.perf_counter()
        populate(rest, args.nodes, args.devices, args.held)
        print(f"populated {args.nodes} slices × {args.devices} devices, {args.held} held in "
              f"{time.perf_counter() - began:.1f} s", file=sys.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            path = write_spec(Path(tmp), "big", nodes=64, gpus=4)
            body = yaml.safe_load(path.read_text())
            body["spec"]["gpus"] = {"via": "dra", "deviceClass": DRIVER, "selectors": [
                f'device.attributes["{DRIVER}"].productName.startsWith("NVIDIA H")',
                f'device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0']}
            path.write_text(yaml.safe_dump(body))
            objects = render(path, "default")
        templates = [o for o in objects if o["kind"] == "ResourceClaimTemplate"]
        demand = preflight.dra_demand(objects[-1], templates)

        def whole() -> str:
            return preflight.fit_check(rest, PYTORCHJOB, objects, "default").line()

        inventory = devices.read_inventory(rest)

        def pure() -> None:
            for request, (pods, name) in demand.items():
                devices.match(inventory, request)
                devices.shortfall(inventory, request, pods, name)

        print(whole())
        pure()
        wall, cpu, pure_ms = [], [], []
        for _ in range(args.runs):
            start, cpu_start = time.perf_counter(), time.process_time()
            whole()
            wall.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - cpu_start) * 1000)
            start = time.perf_counter()
            pure()
            pure_ms.append((time.perf_counter() - start) * 1000)
        print(f"fit_check (DRA, {args.nodes * args.devices} devices, {args.held} held): median "
              f"{statistics.median(wall):.0f} ms wall, {statistics.median(cpu):.0f} ms client CPU; the pure match "
              f"{statistics.median(pure_ms):.0f} ms (runs {args.runs})")
    finally:
        cp.stop()


if __name__ == "__main__":
    main()
