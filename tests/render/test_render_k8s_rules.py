"""render never prints what Kubernetes rejects: Kubernetes' spec-level rules are spec errors with field
and line (or a warning), and a property test renders generated valid specs and checks the output with
Kubernetes' own pod and object rules (kubetrain/rules/k8s) and the operators' webhook rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubetrain.cli.main import cli
from kubetrain.rules.k8s.check import k8s_findings
from kubetrain.validate.operators import trainjob_webhook

BASE: dict[str, Any] = {"image": "busybox:1.36", "command": ["python", "train.py"]}


def _render(tmp_path: Path, spec: dict[str, Any], *extra: str) -> Any:
    path = tmp_path / "kubetrain.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
                                    "metadata": {"name": "job"}, "spec": {**BASE, **spec}}, sort_keys=False))
    return CliRunner().invoke(cli, ["render", "-f", str(path), *extra])


@pytest.mark.parametrize(("spec", "field"), [
    ({"placement": {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "yes"}]}},
     "spec.placement.tolerations[0]"),
    ({"placement": {"tolerations": [{"key": "gpu", "tolerationSeconds": 30}]}}, "spec.placement.tolerations[0]"),
    ({"placement": {"tolerations": [{"key": "bad key", "operator": "Exists"}]}}, "spec.placement.tolerations[0]"),
    ({"security": {"runAsUser": 2**31}}, "spec.security.runAsUser"),
    ({"runPolicy": {"backoffLimit": 2**31}}, "spec.runPolicy.backoffLimit"),
    ({"target": "trainjob", "env": {"PET_NNODES": "2"}}, "spec.env"),
])
def test_spec_errors_name_field_and_line(tmp_path: Path, spec: dict[str, Any], field: str) -> None:
    result = _render(tmp_path, spec)
    assert result.exit_code == 2, result.output
    assert "kubetrain.yaml:" in result.stderr and f": {field}" in result.stderr, result.stderr
    assert not result.stdout


def test_huge_annotations_are_a_spec_error(tmp_path: Path) -> None:
    path = tmp_path / "kubetrain.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {
        "name": "job", "annotations": {"a": "x" * (256 * 1024)}}, "spec": BASE}))
    result = CliRunner().invoke(cli, ["render", "-f", str(path)])
    assert result.exit_code == 2 and "metadata.annotations" in result.stderr and "262144" in result.stderr


def test_infinite_lr_is_a_spec_error(tmp_path: Path) -> None:
    path = tmp_path / "kubetrain.yaml"
    path.write_text("apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: job}\nspec:\n"
                    "  image: busybox:1.36\n  train:\n    model: m:build\n    dataset: d:build\n    lr: .inf\n")
    result = CliRunner().invoke(cli, ["render", "-f", str(path)])
    assert result.exit_code == 2 and "kubetrain.yaml:9: spec.train.lr" in result.stderr, result.stderr


def test_a_code_file_named_dotdot_is_refused(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print(1)\n")
    (tmp_path / "src" / "..config").write_text("x\n")
    result = _render(tmp_path, {"code": {"path": "./src"}})
    assert result.exit_code == 2 and "'..config'" in result.stderr and "spec.code" in result.stderr


def test_standalone_in_a_multi_node_job_warns(tmp_path: Path) -> None:
    result = _render(tmp_path, {"command": ["torchrun", "--standalone", "train.py"], "nodes": 2})
    assert result.exit_code == 0 and "--standalone in a multi-node job" in result.stderr, result.stderr


LABEL = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,10}[a-z0-9])?", fullmatch=True).filter(lambda s: ".." not in s)
TOLERATION = st.fixed_dictionaries({"key": LABEL, "operator": st.sampled_from(["Exists", "Equal"]),
                                    "effect": st.sampled_from(["NoSchedule", "NoExecute"])}).map(
    lambda t: t if t["operator"] == "Exists" else {**t, "value": "v"})
SPECS = st.fixed_dictionaries({
    "nodes": st.integers(1, 64), "gpusPerNode": st.sampled_from([0, 1, 8]),
    "target": st.sampled_from(["pytorchjob", "trainjob"]),
    "env": st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True).filter(
        lambda n: not n.startswith("PET_")), st.text("abc 123", max_size=5), max_size=3),
    "placement": st.fixed_dictionaries({"nodeSelector": st.dictionaries(LABEL, LABEL, max_size=2),
                                        "tolerations": st.lists(TOLERATION, max_size=2)}),
    "runPolicy": st.fixed_dictionaries({"activeDeadlineSeconds": st.integers(1, 2**31 - 1)}),
    "security": st.fixed_dictionaries({"runAsUser": st.integers(0, 2**31 - 1)}),
})


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(spec=SPECS)
def test_what_render_prints_kubernetes_accepts(tmp_path: Path, spec: dict[str, Any]) -> None:
    result = _render(tmp_path, spec)
    if result.exit_code != 0:  # a spec the loader refuses is fine, with a message and no traceback
        assert result.exit_code == 2 and result.stderr.startswith("error:") and not result.stdout, result.output
        return
    for obj in yaml.safe_load_all(result.stdout):
        problems = [f for f in k8s_findings(obj) if f.severity == "error"]
        problems += list(trainjob_webhook(obj)) if obj["kind"] == "TrainJob" else []
        assert not problems, (spec, problems)
