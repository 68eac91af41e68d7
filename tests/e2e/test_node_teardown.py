"""The real node leaves nothing behind: mounts, network namespaces, the bridge, shims, cgroups."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes
import pytest

from tests.testenv import node as real
from tests.testenv.binaries import MissingBinaries
from tests.testenv.controlplane import ControlPlane
from tests.testenv.plugin import unavailable

pytestmark = pytest.mark.slow


def _mounts_under(directory: Path) -> list[str]:
    prefix = str(directory) + "/"
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(prefix)]


def _pods_running(node: real.RealNode) -> bool:
    tasks = node.ctr("tasks", "ls", "-q", timeout=10)
    return tasks.returncode == 0 and len(tasks.stdout.split()) >= 2  # pause + container


def test_a_node_with_a_running_pod_stops_cleanly(tmp_path: Path) -> None:
    try:
        cp = ControlPlane()
        cp.start()
    except MissingBinaries as exc:
        unavailable(str(exc))
    try:
        try:
            node = real.RealNode(cp)
        except MissingBinaries as exc:
            unavailable(str(exc))
        netns_before = real._netns()
        node.start()
        core = kubernetes.client.CoreV1Api(cp.api_client())
        core.create_namespaced_pod("default", {
            "metadata": {"name": "sleeper"},
            "spec": {
                "nodeSelector": {real.NODE_LABEL: "real"},
                "tolerations": [{"key": real.TAINT_KEY, "operator": "Exists"}],
                "containers": [{"name": "c", "image": real.pause_image()}],
            },
        })
        real.wait_until(lambda: _pods_running(node), "the pod's containers to run", 60)
        workdir = node.dir
        bridge, cgroup_root, socket = node.bridge, node.cgroup_root, str(node.socket)
        assert _mounts_under(workdir), "a running pod should have mounts under the node's dir"
        node.stop()
    finally:
        cp.stop()
    assert not _mounts_under(workdir)
    assert real._netns() - netns_before == set()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert f" {bridge}:" not in links and f" {bridge}@" not in links
    shims = subprocess.run(["pgrep", "-f", socket], capture_output=True, text=True, check=False).stdout
    assert not shims.strip(), shims
    assert not real._cgroup_dirs(cgroup_root)
