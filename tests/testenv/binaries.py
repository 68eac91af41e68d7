"""Locate the control-plane binaries built by prepare.sh (or provided by the user).

Resolution order for every binary:
  1. $KUBETRAIN_TESTENV_BIN/<name>
  2. $KUBEBUILDER_ASSETS/<name>   (controller-runtime's envtest convention)
  3. the prepare.sh cache: ${KUBETRAIN_TESTENV_CACHE:-~/.cache/kubetrain/testenv}/<k8s version>/bin
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIRED = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "training-operator",
)
PREPARE_HINT = "run `make testenv` (or `bash tests/testenv/prepare.sh`) to build the test control plane"


def versions() -> dict[str, str]:
    """Parse versions.env (KEY=VALUE lines, shell-compatible)."""
    out: dict[str, str] = {}
    for raw in (HERE / "versions.env").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def cache_root() -> Path:
    if env := os.environ.get("KUBETRAIN_TESTENV_CACHE"):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "kubetrain" / "testenv"


def cache_bin_dir() -> Path:
    return cache_root() / versions()["KUBERNETES_VERSION"] / "bin"


def search_dirs() -> list[Path]:
    dirs = [os.environ.get("KUBETRAIN_TESTENV_BIN"), os.environ.get("KUBEBUILDER_ASSETS")]
    return [Path(d) for d in dirs if d] + [cache_bin_dir()]


def find(name: str) -> Path | None:
    for d in search_dirs():
        candidate = d / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass(frozen=True)
class Binaries:
    paths: dict[str, Path]

    def __getitem__(self, name: str) -> Path:
        return self.paths[name]


class MissingBinaries(RuntimeError):
    """Some component of the test control plane has not been built."""


def resolve(names: tuple[str, ...] = REQUIRED) -> Binaries:
    found = {n: find(n) for n in names}
    missing = sorted(n for n, p in found.items() if p is None)
    if missing:
        where = ", ".join(str(d) for d in search_dirs())
        raise MissingBinaries(
            f"test control plane binaries missing: {', '.join(missing)} (looked in {where}); {PREPARE_HINT}"
        )
    return Binaries({n: p for n, p in found.items() if p is not None})
