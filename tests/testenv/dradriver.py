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
from .polling import TimedOut, wait_for
from .processes import Child

if TYPE_CHECKING:
    from .controlplane import ControlPlane

DRIVER = "gpu.example.com"
BINARY = "dra-example-kubeletplugin"
API = "/apis/resource.k8s.io/v1"


class DraDriver:
    """The plugin for node `node_name`. `kubelet_root`: that node's kubelet --root-dir, where the plugin
    registers (plugins_registry) and serves (plugins); on a kwok node no kubelet ever calls it, so it only
    publishes its devices."""

    def __init__(self, cp: ControlPlane, workdir: Path, node_name: str, kubelet_root: Path, devices: int = 2) -> None:
        found = binaries.find(BINARY)
        if found is None:
            raise MissingBinaries(f"{BINARY} is missing; {PREPARE_HINT}")
        self.cp, self.binary, self.devices = cp, found, devices
        self.node_name, self.kubelet_root = node_name, kubelet_root
        self.dir = workdir / f"dra-{node_name}"
        self.cdi_root = self.dir / "cdi"
        self._child: Child | None = None

    def start(self) -> DraDriver:
        from tests.harness.helpers import rest_for

        cp = self.cp
        self.dir.mkdir(parents=True, exist_ok=True)
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
            f"--kubelet-plugins-directory-path={kubelet_root / 'plugins'}"], cwd=self.dir)
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
