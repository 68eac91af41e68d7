"""The DRA example driver (sigs.k8s.io/dra-example-driver) beside the real node's kubelet.

Its kubelet plugin publishes simulated GPUs of driver gpu.example.com as a ResourceSlice for the real node,
registers with the kubelet (under the kubelet's own root dir), and prepares allocated claims: it writes a CDI
spec per claim (under the node's workdir) and returns the CDI device names, which the kubelet passes to the
container runtime. The DeviceClass is created here in resource.k8s.io/v1 (the driver's Helm chart still
writes v1beta1, which a 1.36 API server does not serve by default).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubetrain.kube.errors import NotFound

from . import binaries
from .binaries import PREPARE_HINT, MissingBinaries
from .node import NODE_NAME
from .polling import wait_for
from .processes import Child

if TYPE_CHECKING:
    from .node import RealNode

DRIVER = "gpu.example.com"
BINARY = "dra-example-kubeletplugin"
API = "/apis/resource.k8s.io/v1"


class DraDriver:
    def __init__(self, node: RealNode, devices: int = 2) -> None:
        found = binaries.find(BINARY)
        if found is None:
            raise MissingBinaries(f"{BINARY} is missing; {PREPARE_HINT}")
        self.node, self.binary, self.devices = node, found, devices
        self.dir = node.dir / "dra"
        self.cdi_root = self.dir / "cdi"
        self._child: Child | None = None

    def start(self) -> DraDriver:
        from tests.harness.helpers import rest_for

        cp = self.node.cp
        self.dir.mkdir(exist_ok=True)
        kubeconfig = cp.write_kubeconfig("dra-example-driver", ("system:masters",), self.dir / "kubeconfig")
        rest = rest_for(cp.api_client())
        with contextlib.suppress(Exception):  # left over from a crashed run: same content
            rest.json("POST", f"{API}/deviceclasses", None, {
                "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}})
        kubelet_root = self.node.dir / "kubelet"
        self._child = cp.sup.start(BINARY, [
            str(self.binary), f"--node-name={NODE_NAME}", f"--cdi-root={self.cdi_root}",
            f"--num-devices={self.devices}", f"--kubeconfig={kubeconfig}",
            f"--kubelet-registrar-directory-path={kubelet_root / 'plugins_registry'}",
            f"--kubelet-plugins-directory-path={kubelet_root / 'plugins'}"], cwd=self.dir)
        wait_for(lambda: self.published(rest) == self.devices or None,
                 f"{BINARY} to publish {self.devices} devices for {NODE_NAME}", 60)
        return self

    def published(self, rest: Any) -> int:
        items = rest.get(f"{API}/resourceslices").get("items") or []
        return sum(len(s["spec"].get("devices") or []) for s in items
                   if s["spec"].get("driver") == DRIVER and s["spec"].get("nodeName") == NODE_NAME)

    def cdi_specs(self) -> list[Path]:
        return sorted(self.cdi_root.glob("*")) if self.cdi_root.is_dir() else []

    def log(self) -> str:
        return self._child.log.read_text(errors="replace") if self._child else ""

    def stop(self) -> None:
        from tests.harness.helpers import rest_for

        if self._child is not None:
            self.node.cp.sup.stop_child(self._child)
            self._child = None
        rest = rest_for(self.node.cp.api_client())
        with contextlib.suppress(NotFound):
            rest.request("DELETE", f"{API}/deviceclasses/{DRIVER}")
        for item in rest.get(f"{API}/resourceslices").get("items") or []:
            if item["spec"].get("driver") == DRIVER:
                with contextlib.suppress(NotFound):
                    rest.request("DELETE", f"{API}/resourceslices/{item['metadata']['name']}")
