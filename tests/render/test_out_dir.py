"""`kubetrain render --out DIR` converges: the output directory is never shipped as code, a second render of an
unchanged project changes no byte (a GitOps drift check `render --out deploy && git diff --exit-code` passes),
kubetrain removes the files it wrote and no longer writes, and a kustomization.yaml it did not write is refused.
`kubectl apply -k` of the output on the real control plane: tests/cli/test_render_apply.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SPEC = """\
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: gitops, namespace: ml}
spec:
  image: ghcr.io/acme/gitops:1.0
  command: [python, train.py]
  code: {path: .}
"""


def kubetrain(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubetrain", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120, check=False)


def git(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60, check=False)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "kubetrain.yaml").write_text(SPEC)
    (tmp_path / "train.py").write_text("print('training')\n")
    assert git("init", "-q", cwd=tmp_path).returncode == 0
    return tmp_path


def test_a_second_render_changes_no_byte(repo: Path) -> None:
    first = kubetrain("render", "--out", "deploy", cwd=repo)
    assert first.returncode == 0, first.stderr
    assert git("add", "-A", cwd=repo).returncode == 0 and git("commit", "-qm", "render", cwd=repo).returncode == 0
    second = kubetrain("render", "--out", "deploy", cwd=repo)
    assert second.returncode == 0, second.stderr
    drift = git("status", "--porcelain", cwd=repo)
    assert drift.stdout == "" and git("diff", "--exit-code", cwd=repo).returncode == 0, drift.stdout
    assert sorted(p.name for p in (repo / "deploy").iterdir()) == [
        ".kubetrain-render", "configmap-" + _configmap_name(repo), "kustomization.yaml", "pytorchjob-gitops.yaml"]


def _configmap_name(repo: Path) -> str:
    return next(line.split("configmap-", 1)[1] for line in (repo / "deploy" / ".kubetrain-render").read_text()
                .splitlines() if line.startswith("configmap-"))


def test_stale_files_kubetrain_wrote_are_removed_and_nothing_else(repo: Path) -> None:
    assert kubetrain("render", "--out", "deploy", cwd=repo).returncode == 0
    old = _configmap_name(repo)
    (repo / "deploy" / "README.md").write_text("hand-written\n")
    (repo / "train.py").write_text("print('training, v2')\n")  # new code: a new content-addressed ConfigMap
    result = kubetrain("render", "--out", "deploy", cwd=repo)
    assert result.returncode == 0, result.stderr
    new = _configmap_name(repo)
    assert new != old
    assert sorted(p.name for p in (repo / "deploy").iterdir()) == [
        ".kubetrain-render", "README.md", f"configmap-{new}", "kustomization.yaml", "pytorchjob-gitops.yaml"]
    assert f"removed deploy/configmap-{old} (kubetrain wrote it; this render does not)" in result.stderr


def test_a_foreign_kustomization_is_refused_and_left_alone(repo: Path) -> None:
    (repo / "deploy").mkdir()
    mine = "resources: [../base]\npatches: [{path: gpu.yaml}]\n"
    (repo / "deploy" / "kustomization.yaml").write_text(mine)
    result = kubetrain("render", "--out", "deploy", cwd=repo)
    assert result.returncode == 2
    assert result.stderr == ("error: --out deploy: deploy/kustomization.yaml was not written by kubetrain; render into "
                             "a directory of its own (e.g. deploy/kubetrain) and list that directory in your "
                             "kustomization's resources\n")
    assert (repo / "deploy" / "kustomization.yaml").read_text() == mine
    assert sorted(p.name for p in (repo / "deploy").iterdir()) == ["kustomization.yaml"]


def test_the_output_directory_is_never_shipped_as_code(repo: Path) -> None:
    for out in ("deploy", "elsewhere/deploy"):
        result = kubetrain("render", "--out", out, cwd=repo)
        assert result.returncode == 0, result.stderr
    assert _configmap_name(repo) == (repo / "elsewhere" / "deploy" / ".kubetrain-render").read_text().split(
        "configmap-", 1)[1].splitlines()[0]  # neither output changed the other's code
    stdout = kubetrain("render", cwd=repo).stdout
    assert "pytorchjob-gitops" not in stdout and "kustomization" not in stdout
