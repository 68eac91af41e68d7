"""images/Dockerfile.controller: hadolint-clean, no torch, runs `kubetrain controller run` as non-root."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.imagebuild.test_images import require_hadolint

DOCKERFILE = Path(__file__).resolve().parents[2] / "images" / "Dockerfile.controller"


def test_hadolint_passes() -> None:
    done = subprocess.run([require_hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_torch_non_root_controller_entrypoint() -> None:
    text = DOCKERFILE.read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert "torch" not in "\n".join(lines) and "[runtime" not in text
    assert lines[-4:] == ["USER 65532:65532", "EXPOSE 8081", 'ENTRYPOINT ["kubetrain"]', 'CMD ["controller", "run"]']
    deployment = (DOCKERFILE.parents[1] / "manifests" / "controller" / "deployment.yaml").read_text()
    assert "runAsUser: 65532" in deployment and "containerPort: 8081" in deployment
