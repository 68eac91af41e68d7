"""GitOps on the real control plane: `kubetrain render --out` applied with `kubectl apply -k` starts the job
(its pods Running, mounting the code ConfigMap), and the re-render of an unchanged project applies as
`unchanged` for every object. `submit --dry-run=server` of a secret-bearing project: no secret byte in what
the API server saw and returned, and a secret not ignored is refused before anything is sent."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.test_cluster_cli import pods_of
from tests.conftest import in_ci
from tests.testenv import kindenv

pytestmark = pytest.mark.controlplane
SECRET = "s3cr3t-do-not-ship"
SPEC = """\
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: gitops}
spec:
  image: ghcr.io/acme/gitops:1.0
  command: [python, train.py]
  nodes: 2
  resources: {cpu: 100m, memory: 64Mi}
  code: {path: .}
"""


def kubectl() -> str:
    """The pinned kubectl `make testenv` builds (tests/testenv/prepare-kind.sh), else the one on PATH."""
    pinned = kindenv.kind_dir() / "bin" / "kubectl"
    found = str(pinned) if pinned.is_file() else shutil.which("kubectl")
    if found is None:
        message = f"no kubectl: neither {pinned} (make testenv) nor one on PATH"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return found


def run(argv: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "KUBETRAIN_CACHE_DIR": str(cwd.parent / "cache")}  # not in the code
    result = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=120, check=False)
    if check:
        assert result.returncode == 0, f"{argv[:4]} exited {result.returncode}: {result.stderr}"
    return result


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for name, content in {"kubetrain.yaml": SPEC, "train.py": "print('training')\n", ".env": f"TOKEN={SECRET}\n",
                          "id_rsa": f"{SECRET}\n", "checkpoints/step-1.pt": SECRET,
                          ".gitignore": ".env\nid_rsa\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    return root


def test_render_out_applies_with_kubectl_k_and_converges(controlplane: Any, namespace: str, project: Path) -> None:
    kt = [sys.executable, "-m", "kubetrain"]
    apply = [kubectl(), "apply", "-k", "deploy", "--server-side", "--field-manager", "gitops",
             "--kubeconfig", str(controlplane.kubeconfig)]
    run([*kt, "render", "--out", "deploy", "-n", namespace], project)
    first = run(apply, project)
    assert sorted(line.split()[-1] for line in first.stdout.splitlines()) == ["serverside-applied"] * 2
    pods = pods_of(controlplane, namespace, "gitops", 2)  # the operator started the job: both pods Running
    configmap = next(f.stem.removeprefix("configmap-") for f in (project / "deploy").glob("configmap-*.yaml"))
    assert all(any((v.get("configMap") or {}).get("name") == configmap for v in p["spec"]["volumes"]) for p in pods)
    run([*kt, "render", "--out", "deploy", "-n", namespace], project)
    again = run([kubectl(), "diff", "-k", "deploy", "--server-side", "--field-manager", "gitops",
                 "--kubeconfig", str(controlplane.kubeconfig)], project, check=False)
    assert again.returncode == 0, again.stdout + again.stderr  # kubectl diff: 0 = no difference
    assert SECRET not in (project / "deploy" / f"configmap-{configmap}.yaml").read_text()


def test_submit_dry_run_ships_no_secret_and_refuses_one_not_ignored(controlplane: Any, namespace: str,
                                                                    project: Path) -> None:
    argv = [sys.executable, "-m", "kubetrain", "submit", "--dry-run=server", "-o", "yaml", "-n", namespace,
            "--kubeconfig", str(controlplane.kubeconfig)]
    result = run(argv, project)
    assert SECRET not in result.stdout + result.stderr
    configmap = next(doc for doc in yaml.safe_load_all(result.stdout) if doc and doc["kind"] == "ConfigMap")
    assert sorted(configmap["data"]) == [".gitignore", "train.py"]
    (project / ".gitignore").write_text(".env\n")
    refused = run(argv, project, check=False)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (f"error: {project}/id_rsa: looks like a secret (its name matches id_rsa) and would "
                              "leave this machine in the image or the code ConfigMap; leave it out with a line "
                              "`id_rsa` in .kubetrainignore, or ship it on purpose with `!id_rsa` there\n")
