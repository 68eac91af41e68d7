"""The DRA example driver (sigs.k8s.io/dra-example-driver) beside the real node's kubelet.

Its kubelet plugin publishes simulated GPUs of driver gpu.example.com as a ResourceSlice for the real node,
registers with the kubelet (under the kubelet's own root dir), and prepares allocated claims: it writes a CDI
spec per claim into `cdi_root` (on the real node: the dir its containerd reads CDI specs from) and returns the
CDI device names, which the kubelet passes to the container runtime; containerd then sets the devices'
environment (GPU_DEVICE_<n>=gpu-<n>, ...) in the container. The DeviceClass is created here in
resource.k8s.io/v1 (the driver's Helm chart still writes v1beta1, which a 1.36 API server does not serve by
default).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubetrain.kube.errors import NotFound

from . import binaries
from .binaries import PREPARE_HINT, MissingBinaries
from .polling import TimedOut, wait_for
from .processes import Child

if TYPE_CHECKING:
    from .controlplane import ControlPlane

DRIVER = "gpu.example.com"
BINARY = "dra-example-kubeletplugin"
API = "/apis/resource.k8s.io/v1"
FAKE_DRIVER = "gpu.kubetrain.test"  # the DeviceClass and driver of `fake_devices`


def fake_device_objects(memory_of_node: dict[str, str], per_node: int = 4) -> list[tuple[str, dict[str, Any]]]:
    """(plural, object): DeviceClass FAKE_DRIVER and a ResourceSlice per node of `per_node` devices (model
    KT100, capacity `memory`), as a DRA driver would publish them; no kubelet plugin prepares them."""
    objects: list[tuple[str, dict[str, Any]]] = [("deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": FAKE_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{FAKE_DRIVER}"'}}]}})]
    for node, memory in memory_of_node.items():
        objects.append(("resourceslices", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{FAKE_DRIVER}"},
            "spec": {"driver": FAKE_DRIVER, "nodeName": node, "pool": {"name": node, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": "KT100"}},
                                  "capacity": {"memory": {"value": memory}}} for i in range(per_node)]}}))
    return objects


@contextlib.contextmanager
def fake_devices(rest: Any, memory_of_node: dict[str, str], per_node: int = 4) -> Iterator[None]:
    """`fake_device_objects` created for the block, deleted after it."""
    objects = fake_device_objects(memory_of_node, per_node)
    for plural, body in objects:
        rest.json("POST", f"{API}/{plural}", None, body)
    try:
        yield
    finally:
        for plural, body in objects:
            with contextlib.suppress(NotFound):
                rest.request("DELETE", f"{API}/{plural}/{body['metadata']['name']}")


class DraDriver:
    """The plugin for node `node_name`. `kubelet_root`: that node's kubelet --root-dir, where the plugin
    registers (plugins_registry) and serves (plugins); on a kwok node no kubelet ever calls it, so it only
    publishes its devices. `cdi_root`: where it writes CDI specs (default: under `workdir`)."""

    def __init__(self, cp: ControlPlane, workdir: Path, node_name: str, kubelet_root: Path, devices: int = 2,
                 cdi_root: Path | None = None) -> None:
        found = binaries.find(BINARY)
        if found is None:
            raise MissingBinaries(f"{BINARY} is missing; {PREPARE_HINT}")
        self.cp, self.binary, self.devices = cp, found, devices
        self.node_name, self.kubelet_root = node_name, kubelet_root
        self.dir = workdir / f"dra-{node_name}"
        self.cdi_root = cdi_root or self.dir / "cdi"
        self._child: Child | None = None

    def start(self) -> DraDriver:
        from tests.harness.helpers import rest_for

        cp = self.cp
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cdi_root.mkdir(parents=True, exist_ok=True)
        kubeconfig = cp.write_kubeconfig("dra-example-driver", ("system:masters",), self.dir / "kubeconfig")
        rest = rest_for(cp.api_client())
        with contextlib.suppress(Exception):  # left over from a crashed run: same content
            rest.json("POST", f"{API}/deviceclasses", None, {
                "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}})
        kubelet_root = self.kubelet_root
        for where in ("plugins_registry", "plugins"):  # a kubelet makes them; a kwok node has none
            (kubelet_root / where).mkdir(parents=True, exist_ok=True)
        self._child = cp.sup.start(f"{BINARY}-{self.node_name}", [
            str(self.binary), f"--node-name={self.node_name}", f"--cdi-root={self.cdi_root}",
            f"--num-devices={self.devices}", f"--kubeconfig={kubeconfig}",
            f"--kubelet-registrar-directory-path={kubelet_root / 'plugins_registry'}",
            f"--kubelet-plugins-directory-path={kubelet_root / 'plugins'}"],
            env={"NODE_NAME": self.node_name}, cwd=self.dir)  # its common CDI device's KUBERNETES_NODE_NAME
        try:
            wait_for(lambda: self.published(rest) == self.devices or None,
                     f"{BINARY} to publish {self.devices} devices for {self.node_name}", 60)
        except TimedOut as exc:
            raise TimedOut(f"{exc}; its log ends:\n{self._child.log_tail()}") from None
        return self

    def published(self, rest: Any) -> int:
        items = rest.get(f"{API}/resourceslices").get("items") or []
        return sum(len(s["spec"].get("devices") or []) for s in items
                   if s["spec"].get("driver") == DRIVER and s["spec"].get("nodeName") == self.node_name)

    def cdi_specs(self) -> list[Path]:
        return sorted(self.cdi_root.glob("*")) if self.cdi_root.is_dir() else []

    @contextlib.contextmanager
    def running(self) -> Iterator[DraDriver]:
        """Started for the with-block, then stopped (its DeviceClass and ResourceSlices removed)."""
        self.start()
        try:
            yield self
        finally:
            self.stop()

    def log(self) -> str:
        return self._child.log.read_text(errors="replace") if self._child else ""

    def stop(self) -> None:
        from tests.harness.helpers import rest_for

        if self._child is not None:
            self.cp.sup.stop_child(self._child)
            self._child = None
        rest = rest_for(self.cp.api_client())
        with contextlib.suppress(NotFound):
            rest.request("DELETE", f"{API}/deviceclasses/{DRIVER}")
        for item in rest.get(f"{API}/resourceslices").get("items") or []:
            if item["spec"].get("driver") == DRIVER and item["spec"].get("nodeName") == self.node_name:
                with contextlib.suppress(NotFound):
                    rest.request("DELETE", f"{API}/resourceslices/{item['metadata']['name']}")
