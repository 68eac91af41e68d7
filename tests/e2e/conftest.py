"""End-to-end fixtures: the digits example built into a real image and run on the real node.

Every scenario drives the kubetrain CLI as a user would (a subprocess: the installed `kubetrain`), against
the session's control plane and its real kubelet node (tests/testenv/node.py). One image and one node are
shared by all scenarios; jobs are small (a few epochs of scikit-learn's 8x8 digits).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from tests.testenv import binaries
from tests.testenv import node as real

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "digits"
# `python -m kubetrain` of this checkout, exactly what the `kubetrain` entry point runs.
KUBETRAIN = (sys.executable, "-m", "kubetrain")
# Placement on the real node only (it is tainted so that other tests' pods stay on kwok's nodes).
PLACEMENT = {
    "nodeSelector": {real.NODE_LABEL: "real"},
    "tolerations": [{"key": real.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
}
CONTROLLER_REF = "localhost/kubetrain/controller:e2e"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass
class Cli:
    """`kubetrain ...` as a subprocess against the test cluster."""

    kubeconfig: Path
    env: dict[str, str]

    def __call__(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [*KUBETRAIN, *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.env, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args[:2])} exited {result.returncode}\n"
                                 f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}")
        return result


@pytest.fixture(scope="session")
def cli(controlplane: Any) -> Cli:
    env = {**os.environ, "KUBECONFIG": str(controlplane.kubeconfig), "NO_COLOR": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
           # podman's default ulimits exceed this VM's hard limits (prepare-node.sh writes this file).
           "CONTAINERS_CONF": str(real.node_bin_dir() / "containers.conf"),
           # `kubetrain build --containerd` runs `ctr`: the node's own (prepare.sh builds it).
           "PATH": os.pathsep.join((str(real.containerd_bin_dir()), os.environ.get("PATH", "")))}
    return Cli(controlplane.kubeconfig, env)


def base_image() -> str:
    path = real.node_bin_dir() / "base-image"
    if not path.is_file():
        pytest.fail(f"{path} missing: the base image was not built (run `make testenv`)", pytrace=False)
    return path.read_text().strip()


@pytest.fixture(scope="session")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits example as a user's project: its specs pointed at the real node and the local base image."""
    root = tmp_path_factory.mktemp("digits")
    shutil.copytree(EXAMPLE, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".kubetrain", "__pycache__"))
    # the MLflow client and TensorBoard, for the job with spec.tracking (tests/e2e/test_recovery.py)
    (root / "requirements.txt").write_text("scikit-learn\nmlflow-skinny>=3.0\ntensorboard>=2.16\n")
    for name in ("kubetrain.yaml", "kubetrain-script.yaml"):
        spec = yaml.safe_load((root / name).read_text())
        spec["spec"]["build"] = {"variant": "cpu", "baseImage": base_image()}
        spec["spec"]["placement"] = PLACEMENT
        spec["spec"]["resources"] = {"cpu": "500m", "memory": "1Gi"}
        (root / name).write_text(yaml.safe_dump(spec, sort_keys=False))
    return root


@pytest.fixture(scope="session")
def image(real_node: real.RealNode, project: Path, cli: Cli) -> str:
    """`kubetrain build --builder podman --containerd <node's socket>`: built once per machine, loaded per session."""
    result = cli("build", "-f", str(project / "kubetrain.yaml"), "--builder", "podman",
                 "--containerd", str(real_node.socket), timeout=1800)
    ref = result.stdout.strip().splitlines()[-1]
    assert ref.startswith("ghcr.io/kubetrain/digits:kt-"), result.stdout
    # The node's containerd root outlives the session (one per machine): drop earlier builds' images there, or
    # it grows by an image per change (5 GB each once the base changes), as a kubelet with image GC would.
    loaded = real_node.ctr("images", "ls", "--quiet").stdout.split()
    stale = [name for name in loaded if name.startswith(ref.split(":")[0] + ":") and name != ref]
    if stale:
        real_node.ctr("images", "rm", *stale)
    return ref


@pytest.fixture
def claim(real_node: real.RealNode, namespace: str) -> Iterator[Path]:
    """PVC `digits-ckpt` bound to a hostPath PersistentVolume whose directory the test can inspect."""
    api = kubernetes.client.CoreV1Api(real_node.cp.api_client())
    path, pv = real_node.hostpath_volume(namespace, "digits-ckpt")
    yield path
    api.delete_persistent_volume(pv)


@pytest.fixture(scope="session")
def controller_image(real_node: real.RealNode, tmp_path_factory: pytest.TempPathFactory) -> str:
    """images/Dockerfile.controller built on the local python image and imported into the node (podman's
    layer cache keeps a rebuild with unchanged sources to seconds, and the node keeps what it imported)."""
    env = {**os.environ, "CONTAINERS_CONF": str(real.node_bin_dir() / "containers.conf")}
    trust = ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"] if CA_BUNDLE.is_file() else []
    base = binaries.versions()["PYTHON_IMAGE"]
    build = ["podman", "build", "-q", "-f", "images/Dockerfile.controller", "--build-arg", f"BASE_IMAGE={base}",
             *trust, "-t", CONTROLLER_REF, "."]
    done = subprocess.run(build, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    # The node's containerd root outlives the session: the image it has under a tag naming podman's image ID is
    # this very build (unchanged sources), and saving and importing its 650 MB again would take ~15 s.
    built = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", CONTROLLER_REF], env=env,
                           check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    repository = CONTROLLER_REF.rsplit(":", 1)[0]
    by_id = f"{repository}:id-{built[:16]}"
    loaded = real_node.ctr("images", "ls", "--quiet").stdout.split()
    if by_id not in loaded:
        archive = tmp_path_factory.mktemp("controller-image") / "controller.tar"
        subprocess.run(["podman", "save", "--format", "oci-archive", "-o", str(archive), CONTROLLER_REF], env=env,
                       check=True, capture_output=True, timeout=600)
        real_node.import_image(archive)
        archive.unlink()
        stale = [name for name in loaded if name.startswith(f"{repository}:id-")]
        if stale:
            real_node.ctr("images", "rm", *stale)
        _ctr_tag(real_node, CONTROLLER_REF, by_id)
    _ctr_tag(real_node, by_id, CONTROLLER_REF)
    return CONTROLLER_REF


def _ctr_tag(node: real.RealNode, source: str, target: str) -> None:
    result = node.ctr("images", "tag", "--force", source, target)
    assert result.returncode == 0, result.stderr
