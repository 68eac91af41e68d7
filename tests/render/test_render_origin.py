"""render's last check (Kubernetes' rules on the rendered objects) names the kubetrain.yaml field and line
that produced a refused value, not the rendered field."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.errors import RejectedRender
from kubetrain.jobspec.load import load_spec
from kubetrain.render.origin import traced_problems

SPEC = """\
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: t}
spec:
  image: busybox:1.36
  command: [python, train.py]
  nodes: 2
  gpusPerNode: 1
  placement: {cloud: generic, gpuType: "x/y"}
"""


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "kubetrain.yaml"
    path.write_text(SPEC)
    return path


def test_a_refused_rendered_value_is_reported_at_its_spec_line(tmp_path: Path) -> None:
    """The generic profile puts gpuType into a node-selector label value, which no spec check sees."""
    path = _spec(tmp_path)
    result = CliRunner().invoke(cli, ["render", "-f", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines  # Master and Worker templates: one problem in the spec
    assert lines[0].startswith(f"error: {path}:9: spec.placement.gpuType: label value 'x/y' must be")
    assert 'rendered as PyTorchJob/t spec.pytorchReplicaSpecs.Master.template.spec.nodeSelector' in lines[0]


def test_a_value_the_spec_does_not_hold_keeps_the_rendered_field(tmp_path: Path) -> None:
    loaded = load_spec(str(_spec(tmp_path)))
    exc = RejectedRender("PyTorchJob/t", [(("spec", "x"), "'made-up' is invalid", "made-up")])
    assert traced_problems(exc, loaded) == []
    assert str(exc) == "the rendered PyTorchJob/t would be rejected: spec.x: 'made-up' is invalid"
