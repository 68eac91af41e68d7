"""A real node in the test control plane: containerd + runc + CNI bridge + kubelet + CoreDNS.

    node = RealNode(controlplane).start()     # the `node` fixture in plugin.py
    node.import_image(archive)                # what `kubetrain build --containerd` also does
    node.stop()

Everything lives under <controlplane workdir>/node, so it cannot clash with
another session or the host:

* containerd (v1.7, built by prepare.sh: Debian's 1.6 has no CDI) has its own
  root, state, socket, CNI config and `opt` dir, and a sandbox (pause) image
  built on this machine; runc is Debian's. CDI is on, with the node's own spec
  dir (`cdi_dir`), where a DRA driver's kubelet plugin writes the devices it
  prepares (tests/testenv/dradriver.py).
* the pods' network is a bridge with its own name and a random /24, created
  here (so CoreDNS can bind the gateway address before the first pod exists);
  host-local IPAM keeps its leases in the workdir. No NAT, no iptables rules.
* the kubelet (cgroupfs driver, `failCgroupV1: false` on this cgroup-v1 host)
  has its own root dir, pod-log dir and cgroup root, serves on the bridge address with
  a certificate of the cluster CA (so the apiserver's logs/exec path is the
  verified one), and authenticates and authorizes the apiserver as a cluster
  would (x509 client CA + webhook). The node is tainted and labelled so only
  pods that ask for it land here; kwok keeps simulating the GPU nodes.
* CoreDNS serves cluster.local from the apiserver on the gateway address:
  pods resolve the operator's per-replica (headless) Services.

stop() deletes the node's pods and lets the kubelet and containerd tear them
down (CNI DEL, network namespaces), then stops the processes and removes what
a crash could leave: shims and container processes (by cgroup), mounts under
the workdir, new network namespaces, the bridge and the cgroups.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kubernetes
import yaml

from . import binaries, nodeconf, pki
from .polling import TimedOut, wait_for
from .processes import Child, free_port, wait_until

__all__ = ["NodeUnavailable", "RealNode", "wait_until"]

if TYPE_CHECKING:
    from .controlplane import ControlPlane

NODE_NAME = "real-node-0"
NODE_LABEL = "kubetrain.test/node"  # value "real": what e2e jobs select
TAINT_KEY = nodeconf.TAINT
CNI_BIN_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
NETNS_DIR = Path("/var/run/netns")  # where containerd 1.6's CRI pins pod network namespaces
APT_PACKAGES = "runc containernetworking-plugins"
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
CONTAINER_LOG_LINKS = Path("/var/log/containers")  # the kubelet's symlinks to pod logs (a fixed path)


class NodeUnavailable(binaries.MissingBinaries):
    """This machine cannot run the real node (not root, not Linux, or a part is missing)."""


def node_bin_dir() -> Path:
    return binaries.cache_root() / "node"


def containerd_bin_dir() -> Path:
    """containerd, its runc shim and ctr, built by prepare.sh (they do not depend on the Kubernetes version)."""
    return binaries.cache_root() / f"containerd-{binaries.versions()['CONTAINERD_VERSION']}" / "bin"


def pause_image() -> str:
    return binaries.versions()["PAUSE_IMAGE"]


def requirements() -> dict[str, Path]:
    """Every host binary and cached image the node needs; raises NodeUnavailable naming what is missing."""
    if not os.uname().sysname == "Linux" or os.geteuid() != 0:
        raise NodeUnavailable("the real node needs root on Linux (containerd, kubelet, mounts, netns)")
    tools = ("runc", "ip", "mount", "umount")
    images = ("pause.tar", "init.tar")
    located: dict[str, Path | None] = {name: _file(containerd_bin_dir() / name) for name in CONTAINERD_BINARIES}
    located |= {name: _file(Path(shutil.which(name) or "")) for name in tools}
    located["cni"] = next((d for d in CNI_BIN_DIRS if (d / "bridge").is_file()), None)
    located |= {name: binaries.find(name) for name in ("kubelet", "coredns")}
    located |= {image: _file(node_bin_dir() / image) for image in images}
    hints = {**{name: f"{name} (apt: {APT_PACKAGES}, iproute2)" for name in tools},
             **{image: f"the image {node_bin_dir() / image}" for image in images},
             "cni": "the CNI plugins (apt: containernetworking-plugins)"}
    missing = [hints.get(name, name) for name, path in located.items() if path is None]
    if missing:
        raise NodeUnavailable(f"the real node is missing: {', '.join(missing)}; {binaries.PREPARE_HINT}")
    return {name: path for name, path in located.items() if path is not None}


def _file(path: Path) -> Path | None:
    return path if path.is_file() else None


def _containerd_root(workdir: Path) -> tuple[Path, Any]:
    """containerd's root (content store, snapshots, metadata): a cache shared across sessions, held with an
    exclusive flock for the whole session, so a multi-GB training image is imported once per machine, not
    once per session. A session that finds it locked gets a fresh root in its workdir. Everything with a
    lifetime (sockets, shims, mounts, network namespaces) is in the per-session state dir either way.
    One root per containerd version, beside its binaries: another version never opens its metadata."""
    base = containerd_bin_dir().parent
    shared = base / "root"
    shared.mkdir(parents=True, exist_ok=True)
    lock = (base / "root.lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        return workdir / "containerd" / "root", None
    return shared, lock


def _subnet() -> ipaddress.IPv4Network:
    """A random 10.x.y.0/24 no route of this machine uses yet."""
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=True).stdout
    used = [ipaddress.ip_network(r.split()[0], strict=False) for r in routes.splitlines() if r[:1].isdigit()]
    for _ in range(100):
        net = ipaddress.ip_network(f"10.{random.randint(100, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise NodeUnavailable("no free 10.x.y.0/24 for the pod network")


class RealNode:
    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.bins = requirements()
        self.dir = cp.workdir / "node"
        self.dir.mkdir(exist_ok=True)
        self.id = cp.workdir.name.rsplit("-", 1)[-1][-6:].lower()
        self.bridge = f"kt{self.id}"[:15]
        self.cgroup_root = f"/kubetrain-{self.id}"
        self.subnet = _subnet()
        self.gateway = str(next(self.subnet.hosts()))
        self.socket = self.dir / "containerd.sock"
        self.cdi_dir = self.dir / "cdi"  # CDI specs containerd reads (a DRA driver's kubelet plugin writes them)
        self.ports = {"kubelet": free_port(), "kubelet_health": free_port(), "dns_health": free_port(),
                      "dns_ready": free_port()}
        self._netns_before: set[str] = set()
        self._procs: dict[str, Child] = {}
        self.containerd_root, self._root_lock = _containerd_root(self.dir)

    # ----------------------------------------------------------------- public
    @property
    def name(self) -> str:
        return NODE_NAME

    def ctr(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        argv = [str(self.bins["ctr"]), "--address", str(self.socket), "--namespace", "k8s.io", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)

    def import_image(self, archive: Path) -> None:
        result = self.ctr("images", "import", "--no-unpack", str(archive))
        if result.returncode != 0:
            raise RuntimeError(f"ctr images import {archive} failed: {result.stderr.strip()}")

    def hostpath_volume(self, namespace: str, claim: str, size: str = "1Gi", uid: int = 1000) -> tuple[Path, str]:
        """A PVC `claim` pre-bound to a hostPath PersistentVolume on this node; returns (host dir, PV name).

        The directory belongs to `uid` (the image's non-root user): hostPath volumes ignore fsGroup."""
        pv = f"{namespace}-{claim}"[:63]
        path = self.dir / "volumes" / pv
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, uid, uid)
        core = kubernetes.client.CoreV1Api(self.cp.api_client())
        core.create_persistent_volume({
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(path), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        })
        core.create_namespaced_persistent_volume_claim(namespace, {
            "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv,
                     "resources": {"requests": {"storage": size}}},
        })
        return path, pv

    def log(self, component: str) -> str:
        return self._procs[component].log.read_text(errors="replace")

    def start(self) -> RealNode:
        self._netns_before = _netns()
        try:
            for step in (self._network, self._containerd, self._coredns, self._kubelet):
                began = time.monotonic()
                step()
                self.cp.timings[f"node-{step.__name__.strip('_')}"] = round(time.monotonic() - began, 2)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._drain()
        for name in ("kubelet", "coredns", "containerd"):
            child = self._procs.pop(name, None)
            if child is not None:
                self.cp.sup.stop_child(child)
        self._cleanup()

    # ------------------------------------------------------------------ steps
    def _network(self) -> None:
        conf = self.dir / "cni" / "net.d"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "10-kubetrain.conflist").write_text(nodeconf.cni_conflist(self.bridge, self.subnet, self.dir))
        ip = ["ip", "link"]
        subprocess.run([*ip, "add", "name", self.bridge, "type", "bridge"], check=True, capture_output=True)
        subprocess.run(["ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge],
                       check=True, capture_output=True)
        subprocess.run([*ip, "set", self.bridge, "up"], check=True, capture_output=True)

    def _containerd(self) -> None:
        config = self.dir / "containerd.toml"
        self.cdi_dir.mkdir(exist_ok=True)
        config.write_text(nodeconf.containerd_toml(self.dir, self.containerd_root, self.socket, self.bins["cni"],
                                                   self.cdi_dir))
        # containerd finds its shim on PATH: this build's, not the host's (Debian's 1.6 may be installed).
        path = f"{containerd_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}"
        child = self._start("containerd", [self.bins["containerd"], "--config", config], env={"PATH": path})
        wait_until(lambda: self.ctr("version", timeout=10).returncode == 0, "containerd", 30, child)
        self.import_image(self.bins["pause.tar"])
        self.import_image(self.bins["init.tar"])

    def _coredns(self) -> None:
        kubeconfig = self.cp.write_kubeconfig("coredns", ("system:masters",), self.dir / "coredns.kubeconfig")
        corefile = self.dir / "Corefile"
        corefile.write_text(nodeconf.corefile(self.gateway, kubeconfig, self.ports))
        child = self._start("coredns", [self.bins["coredns"], "-conf", corefile])
        url = f"http://127.0.0.1:{self.ports['dns_ready']}/ready"
        wait_until(lambda: _http_ok(url), "CoreDNS /ready", 60, child)

    def _kubelet(self) -> None:
        d = self.cp.pki_dir
        # The node IP is the bridge's address: kubelet refuses a loopback node IP. The apiserver dials the
        # kubelet there (InternalIP), and verifies this certificate against the cluster CA.
        pki.serving_cert(self.cp.ca, NODE_NAME, ("localhost", NODE_NAME), (self.gateway,)).write(d, "kubelet")
        _make_cgroups(self.cgroup_root)
        kubeconfig = self.cp.write_kubeconfig(f"system:node:{NODE_NAME}", ("system:nodes",),
                                              self.dir / "kubelet.kubeconfig")
        config = self.dir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(nodeconf.kubelet_config(self, d)))
        child = self._start("kubelet", [
            self.bins["kubelet"],
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.dir / 'kubelet'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={self.gateway}",
            f"--node-labels={NODE_LABEL}=real",
            "--v=1",
        ])
        core = kubernetes.client.CoreV1Api(self.cp.api_client())
        wait_until(lambda: _ready(core.read_node(NODE_NAME)), f"node {NODE_NAME} Ready", 120, child)

    def _start(self, name: str, argv: list[Any], env: dict[str, str] | None = None) -> Child:
        child = self.cp.sup.start(name, [str(a) for a in argv], env=env, cwd=self.dir)
        self._procs[name] = child
        return child

    # --------------------------------------------------------------- teardown
    def _drain(self) -> None:
        """Delete this node's pods and wait (bounded) until containerd runs none of them."""
        if "kubelet" not in self._procs:
            return
        core = kubernetes.client.CoreV1Api(self.cp.api_client())
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE_NAME}").items:
            with contextlib.suppress(kubernetes.client.ApiException):
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)

        def no_tasks() -> bool:
            tasks = self.ctr("tasks", "ls", "-q", timeout=10)
            return tasks.returncode != 0 or not tasks.stdout.strip()

        with contextlib.suppress(TimedOut):  # what is left is killed with its cgroups by the teardown
            wait_for(no_tasks, "containerd's tasks to end", 30, 0.5)

    def _cleanup(self) -> None:
        """What SIGKILLed components can leave behind; each step is idempotent."""
        _kill_cgroup_tree(self.cgroup_root)
        _kill_matching(f"-address {self.socket}")  # containerd-shim-runc-v2 (its own session)
        _unmount_under(self.dir)
        for name in _netns() - self._netns_before:
            if name.startswith("cni-"):
                subprocess.run(["umount", str(NETNS_DIR / name)], capture_output=True, check=False)
                with contextlib.suppress(OSError):
                    (NETNS_DIR / name).unlink()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        _remove_cgroups(self.cgroup_root)
        _remove_links_into(CONTAINER_LOG_LINKS, self.dir)
        if self._root_lock is not None:
            self._root_lock.close()  # releases the flock
            self._root_lock = None


# ------------------------------------------------------------------- helpers
def _ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=3) as resp:
        return int(resp.status) == 200


def _netns() -> set[str]:
    try:
        return {p.name for p in NETNS_DIR.iterdir()}
    except OSError:
        return set()


def _cgroup_dirs(root: str) -> list[Path]:
    """Every cgroup-v1 hierarchy's copy of `root` (kubelet's cgroupRoot), deepest first."""
    out: list[Path] = []
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / root.lstrip("/")
        if top.is_dir() and not top.is_symlink():
            out.extend(sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)))
            out.append(top)
    return out


def _make_cgroups(root: str) -> None:
    """kubelet wants its cgroupRoot to exist in every v1 hierarchy; cpuset needs its cpus/mems filled in."""
    base = Path("/sys/fs/cgroup")
    for hierarchy in base.iterdir():
        if hierarchy.name == "unified" or hierarchy.is_symlink() or not (hierarchy / "cgroup.procs").exists():
            continue
        top = hierarchy / root.lstrip("/")
        top.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).exists():
                (top / name).write_text((hierarchy / name).read_text())


def _kill_cgroup_tree(root: str) -> None:
    pids = set()
    for d in _cgroup_dirs(root):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if pids:
        time.sleep(0.5)


def _remove_cgroups(root: str) -> None:
    for d in _cgroup_dirs(root):
        with contextlib.suppress(OSError):
            d.rmdir()


def _kill_matching(needle: str) -> None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(proc.name), signal.SIGKILL)


def _remove_links_into(links: Path, directory: Path) -> None:
    prefix = str(directory) + "/"
    with contextlib.suppress(OSError):
        for link in links.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(prefix):
                    link.unlink()


def _unmount_under(directory: Path) -> None:
    """Unmount everything mounted below `directory`, deepest first (lazily if busy)."""
    prefix = str(directory.resolve()) + "/"
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix):
            mounts.append(point)
    for point in sorted(set(mounts), key=len, reverse=True):
        if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
