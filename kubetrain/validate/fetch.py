"""`kubetrain schemas fetch`: download the pinned upstream CRDs into the cache, verifying sha256."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from kubetrain.errors import SchemaError
from kubetrain.validate.schemas import download, schema_cache_dir

GITHUB_RAW = "https://raw.githubusercontent.com"
OFFLINE_HINT = "; pass --schema FILE instead if you are offline"


@dataclass(frozen=True)
class PinnedSchema:
    name: str  # the CRD's name
    ref: str  # upstream git tag
    path: str  # path in the repository
    sha256: str
    repository: str = "kubeflow/trainer"  # on GitHub

    @property
    def filename(self) -> str:
        return f"{self.name}.yaml"

    def url(self, base_url: str | None = None) -> str:
        """Under `base_url` (a mirror laid out as <ref>/<path>), else the file on GitHub."""
        base = base_url or f"{GITHUB_RAW}/{self.repository}"
        return f"{base.rstrip('/')}/{self.ref}/{self.path}"


PINNED = (
    PinnedSchema("pytorchjobs.kubeflow.org", "v1.9.4", "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
                 "8b8a8a719cc94173169290251e817f7ac2bb425c20b6c2fa813397bcf4e932ed"),
    PinnedSchema("trainjobs.trainer.kubeflow.org", "v2.3.0",
                 "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
                 "a742cafc5b5582640c7e0b7467c024fc237256fbca5ba0a9f0531dfb66d64416"),
    PinnedSchema("clustertrainingruntimes.trainer.kubeflow.org", "v2.3.0",
                 "manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml",
                 "ec84dc3388fcdbe8c61d3c247a773d14458dd9438e995bea8e50d2a18080eef9"),
    # The namespaced runtime a `gpus.via: dra` TrainJob runs on (kubetrain/render/dra.py).
    PinnedSchema("trainingruntimes.trainer.kubeflow.org", "v2.3.0",
                 "manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml",
                 "69b8dbdf60a18e28cddcc2b8dfc4ce72a943e14b531b9389d593118faee4919f"),
    # What the Trainer creates from a TrainJob, which `validate --exact` dry-runs.
    PinnedSchema("jobsets.jobset.x-k8s.io", "v0.12.0", "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
                 "d022b87624512cf0b6741b31b24a2bea9945b5a838b50713af29332c878bb6fe", "kubernetes-sigs/jobset"),
)


def fetch_pinned(base_url: str | None = None, timeout: float = 30.0) -> list[Path]:
    """Download every pinned CRD (skipping ones already cached and intact); returns the cached paths."""
    base = base_url or os.environ.get("KUBETRAIN_SCHEMA_BASE_URL")
    directory = schema_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for pinned in PINNED:
        target = directory / pinned.filename
        if not (target.is_file() and _sha256(target.read_bytes()) == pinned.sha256):
            _store(target, download(pinned.url(base), timeout, OFFLINE_HINT), pinned)
        paths.append(target)
    return paths


def _store(target: Path, payload: bytes, pinned: PinnedSchema) -> None:
    digest = _sha256(payload)
    if digest != pinned.sha256:
        raise SchemaError(f"{pinned.ref}/{pinned.path}: sha256 {digest} does not match the pinned {pinned.sha256}; "
                          "refusing to cache it")
    tmp = target.with_name(f".{target.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(target)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
