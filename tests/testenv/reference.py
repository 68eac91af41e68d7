"""The upstream CRDs the tests validate against, taken from the pinned Go modules.

prepare.sh copies them out of the modules it already downloads (the Kubeflow
training-operator v1.9.4 and Trainer v2.3.0 modules pinned under gomod/) into

    <cache>/<k8s version>/reference/kubeflow-training-operator-<v>/kubeflow.org_pytorchjobs.yaml
    <cache>/<k8s version>/reference/kubeflow-trainer-<v>/trainer.kubeflow.org_<kind>.yaml
        (trainjobs, clustertrainingruntimes, trainingruntimes)

and the tests check every file against the sha256 pins kubetrain itself keeps
for `kubetrain schemas fetch` (kubetrain/validate/fetch.py), so the suite and
the product agree on what "the upstream CRD" is. KUBETRAIN_REFERENCE_DIR points
the tests at another directory of the same layout.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kubetrain.validate.fetch import PINNED

from .binaries import PREPARE_HINT, MissingBinaries, cache_root, versions


class ReferenceMissing(MissingBinaries):
    """prepare.sh has not copied the upstream CRDs yet (skipped locally, a failure under CI)."""


class ReferenceMismatch(RuntimeError):
    """An upstream CRD differs from kubetrain's pin (always a failure)."""


def reference_dir() -> Path:
    if env := os.environ.get("KUBETRAIN_REFERENCE_DIR"):
        return Path(env)
    return cache_root() / versions()["KUBERNETES_VERSION"] / "reference"


def operator_dir(root: Path | None = None) -> Path:
    return (root or reference_dir()) / f"kubeflow-training-operator-{versions()['TRAINING_OPERATOR_VERSION']}"


def trainer_dir(root: Path | None = None) -> Path:
    return (root or reference_dir()) / f"kubeflow-trainer-{versions()['TRAINER_VERSION']}"


def jobset_dir(root: Path | None = None) -> Path:
    """JobSet's CRD: prepare.sh copies it from the pinned JobSet module beside the reference dir."""
    return (root or reference_dir()).parent / "manifests" / "jobset"


def jobset_crd(root: Path | None = None) -> Path:
    return jobset_dir(root) / "jobset.x-k8s.io_jobsets.yaml"


def pytorchjob_crd(root: Path | None = None) -> Path:
    return operator_dir(root) / "kubeflow.org_pytorchjobs.yaml"


def pinned_files(root: Path | None = None) -> dict[Path, str]:
    """Each reference file -> the sha256 kubetrain pins for it."""
    out: dict[Path, str] = {}
    directories = {"kubeflow/trainer": trainer_dir(root), "kubernetes-sigs/jobset": jobset_dir(root)}
    for pin in PINNED:
        directory = operator_dir(root) if pin.ref == versions()["TRAINING_OPERATOR_VERSION"] else \
            directories[pin.repository]
        out[directory / Path(pin.path).name] = pin.sha256
    return out


def verify(root: Path | None = None) -> Path:
    """The reference dir, after checking every pinned file is there and intact."""
    root = root or reference_dir()
    for path, sha in pinned_files(root).items():
        if not path.is_file():
            raise ReferenceMissing(f"upstream CRD {path} is missing; {PREPARE_HINT}")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != sha:
            raise ReferenceMismatch(f"{path}: sha256 {digest} does not match kubetrain's pin {sha}")
    return root
