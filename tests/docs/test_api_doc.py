"""docs/api.md's examples run, as written, against the real test control plane."""

from __future__ import annotations

import doctest
import re
from pathlib import Path
from typing import Any

import kubernetes
import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.controlplane


def _claim(k8s: Any, namespace: str, directory: Path) -> None:
    """The digits example mounts the claim digits-ckpt: a hostPath volume bound to it, so preflight passes."""
    core = kubernetes.client.CoreV1Api(k8s)
    core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-ckpt"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "hostPath": {"path": str(directory)}, "claimRef": {"namespace": namespace, "name": "digits-ckpt"}}})
    core.create_namespaced_persistent_volume_claim(namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "digits-ckpt"},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": f"{namespace}-ckpt",
                 "resources": {"requests": {"storage": "1Gi"}}}})


def test_the_api_docs_run(controlplane: Any, k8s: Any, namespace: str, tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", str(tmp_path / "cache"))  # only the cluster's CRDs
    _claim(k8s, namespace, tmp_path)
    # The ```python blocks with >>> prompts, in order, as one doctest (the fences are not expected output).
    blocks = re.findall(r"^```python\n(.*?)^```", (REPO / "docs" / "api.md").read_text(), re.MULTILINE | re.DOTALL)
    text = "\n".join(block for block in blocks if block.startswith(">>>"))
    globs = {"kubeconfig": str(controlplane.kubeconfig), "namespace": namespace, "workdir": str(tmp_path)}
    test = doctest.DocTestParser().get_doctest(text, globs, "docs/api.md", str(REPO / "docs" / "api.md"), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    try:
        result = runner.run(test)
    finally:
        kubernetes.client.CoreV1Api(k8s).delete_persistent_volume(f"{namespace}-ckpt")
    assert result.attempted >= 20
    assert result.failed == 0, "docs/api.md: see the doctest report above"


def test_importing_the_api_loads_neither_torch_nor_kubernetes() -> None:
    import subprocess
    import sys

    code = ("import sys, kubetrain.api\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'kubernetes', 'click'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "[]"
