"""The real kind cluster's prerequisites, as tests/testenv/prepare-kind.sh leaves them: the kind CLI and the
pinned kubectl (on PATH for the CLI under test), the node image, and a local copy of the training-operator's
manifests (GitHub is not reachable from the test machines)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.testenv import binaries, node


class KindUnavailable(binaries.MissingBinaries):
    """This machine cannot run the real kind cluster (not root, or a part is missing)."""


@dataclass(frozen=True)
class KindEnv:
    bin_dir: Path  # kind, kubectl (the pinned version)
    node_image: str
    operator_manifests: Path  # the standalone overlay, as `kubectl apply -k` takes it
    containers_conf: Path
    nvidia_ctk: Path  # for the node, not on PATH

    def env(self, kubeconfig: Path) -> dict[str, str]:
        """The CLI's environment: the pinned kind/kubectl first on PATH, kind's podman provider."""
        return {**os.environ, "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                "KUBECONFIG": str(kubeconfig), "KIND_EXPERIMENTAL_PROVIDER": "podman",
                "CONTAINERS_CONF": str(self.containers_conf), "NO_COLOR": "1"}


def kind_dir() -> Path:
    """What prepare-kind.sh builds for the pinned Kubernetes version (kubeadm, kubectl, kubelet, kube-proxy and
    their stamps): one directory per version, so a version bump never overwrites what another checkout uses."""
    return binaries.cache_root() / binaries.versions()["KUBERNETES_VERSION"] / "kind"


def image_cache_dir() -> Path:
    """The kind node's containerd root: image content (the training image's layers, kubeadm's images by their
    versioned tags), shared by every Kubernetes version."""
    return binaries.cache_root() / "kind"


def node_image() -> str:
    versions = binaries.versions()
    return f"{versions['KIND_NODE_IMAGE_REPO']}:{versions['KUBERNETES_VERSION']}"


def requirements() -> KindEnv:
    """Everything `cluster create` needs here; raises KindUnavailable naming what is missing."""
    if os.uname().sysname != "Linux" or os.geteuid() != 0:
        raise KindUnavailable("the kind cluster needs root on Linux (rootful podman)")
    bin_dir = kind_dir() / "bin"
    ctk = kind_dir() / "nvidia" / "nvidia-ctk"
    missing = [str(path) for path in (bin_dir / "kind", bin_dir / "kubectl", ctk) if not path.is_file()]
    if not shutil.which("podman"):
        missing.append("podman (apt, installed by prepare-node.sh)")
    manifests = kind_dir() / "training-operator" / "manifests" / "overlays" / "standalone"
    if not manifests.is_dir():
        missing.append(str(manifests))
    conf = node.node_bin_dir() / "containers.conf"
    image = node_image()
    if shutil.which("podman") and subprocess.run(["podman", "image", "exists", image], check=False,
                                                 env={**os.environ, "CONTAINERS_CONF": str(conf)}).returncode:
        missing.append(f"the node image {image}")
    if missing:
        raise KindUnavailable(f"the kind cluster is missing: {', '.join(missing)}; {binaries.PREPARE_HINT}")
    return KindEnv(bin_dir, image, manifests, conf, ctk)


@dataclass(frozen=True)
class ImageStore:
    containers_conf: Path  # for `cluster create`
    warm: bool  # the node's containerd root is the cache, and an earlier run loaded an image on `base` into it
    marker: Path | None = None  # the cache's note of the base its images are on (None: the node's own root)

    def loaded(self, base: str) -> None:
        """Note that an image on `base` (an image ID) is now in the cache."""
        if self.marker is not None:
            self.marker.write_text(f"{base}\n")


@contextmanager
def image_store(kind: KindEnv, workdir: Path, base: str) -> Iterator[ImageStore]:
    """The containers.conf for `cluster create`: the kind node's containerd root (/var/lib/containerd) is a
    cache shared across sessions, bind-mounted into the node (containers.conf's `volumes`, which podman adds
    to every container it creates with it), so the training image's gigabytes of base layers reach the node
    once per machine and `build --kind` sends only the layers a code change made. Held with an exclusive
    flock while the cluster lives; a session that finds it locked gets the node's own empty root. The node
    imports kubeadm's images at every boot (kind-preload.service), so an empty cache is a working one.
    `base`: the training image's base (an image ID); the cache is warm only for the base of its last load, as
    a rebuilt base has new layers the node lacks."""
    root = image_cache_dir() / "containerd-root"
    root.mkdir(parents=True, exist_ok=True)
    conf = workdir / "containers.conf"
    with (image_cache_dir() / "containerd-root.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            shutil.copyfile(kind.containers_conf, conf)
            yield ImageStore(conf, warm=False)
            return
        volume = f'volumes = ["{root}:/var/lib/containerd"]'
        conf.write_text(kind.containers_conf.read_text().replace("[containers]\n", f"[containers]\n{volume}\n", 1))
        blobs = root / "io.containerd.content.v1.content" / "blobs" / "sha256"
        marker = image_cache_dir() / "containerd-root.base"
        noted = marker.read_text().strip() if marker.is_file() else ""
        yield ImageStore(conf, blobs.is_dir() and any(blobs.iterdir()) and noted == base, marker)
