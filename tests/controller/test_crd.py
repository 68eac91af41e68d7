"""The committed CRD is exactly what the spec model generates, and it is structural."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from kubetrain.controller.crd import crd, crd_yaml, sweep_crd, sweep_crd_yaml
from kubetrain.controller.install import objects_for
from kubetrain.jobspec.fielddocs import models_in
from kubetrain.jobspec.model import TrainingJob

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "manifests" / "crd" / "trainingjobs.kubetrain.dev.yaml"
SWEEP_CRD_FILE = REPO / "manifests" / "crd" / "sweeps.kubetrain.dev.yaml"
FORBIDDEN = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "title", "default", "patternProperties", "const"}


def test_committed_crd_matches_the_model() -> None:
    assert CRD_FILE.read_text() == crd_yaml(), (
        "manifests/crd/trainingjobs.kubetrain.dev.yaml is out of date: regenerate it with "
        "`python -m kubetrain.controller.crd > manifests/crd/trainingjobs.kubetrain.dev.yaml`")


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, value in node.items():
            if key in ("properties",):
                for name, sub in value.items():
                    out += _walk(sub, f"{path}.{name}")
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                out += _walk(value, f"{path}[]")
    return out


def test_committed_sweep_crd_matches_the_model() -> None:
    assert SWEEP_CRD_FILE.read_text() == sweep_crd_yaml(), (
        "manifests/crd/sweeps.kubetrain.dev.yaml is out of date: regenerate it with "
        "`python -m kubetrain.controller.crd sweeps > manifests/crd/sweeps.kubetrain.dev.yaml`")


@pytest.mark.parametrize("definition", [crd, sweep_crd])
def test_schema_is_structural(definition: Any) -> None:
    schema = definition()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert not FORBIDDEN & set(node), f"{path}: {FORBIDDEN & set(node)}"
        assert node.get("additionalProperties") is not False, path
        if path and path != ".metadata":
            assert "type" in node, f"{path}: every node needs a type"


def _fields(model: type[BaseModel], prefix: str) -> list[tuple[str, type[BaseModel] | None]]:
    out: list[tuple[str, type[BaseModel] | None]] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        sub = next(iter(models_in(info.annotation)), None)
        out.append((f"{prefix}.{key}", sub))
        if sub is not None:
            out += _fields(sub, f"{prefix}.{key}")
    return out


def _node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.strip(".").split("."):
        node = node.get("items", node)
        node = node["properties"][part]
    return node


def test_every_spec_field_is_in_the_crd_with_its_description() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    fields = [(p, m) for p, m in _fields(TrainingJob, "") if p.startswith(".spec")]
    assert len(fields) > 60
    for path, _ in fields:
        node = _node(schema, path)
        assert node.get("description"), f"{path} has no description"


def test_printer_columns_short_names_categories_status() -> None:
    spec = crd()["spec"]
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Target", "Nodes", "GPUs", "Phase", "Step", "Loss", "Age"]
    assert "tj" in spec["names"]["shortNames"] and "kubetrain" in spec["names"]["categories"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"phase", "conditions", "observedGeneration", "progress", "children", "replicas"} <= set(status)


def test_crd_command_prints_the_committed_file() -> None:
    done = subprocess.run([sys.executable, "-m", "kubetrain", "controller", "crd"], capture_output=True,
                          text=True, check=True, cwd=REPO)
    assert yaml.safe_load(done.stdout) == yaml.safe_load(CRD_FILE.read_text())


def test_install_objects_come_from_the_kustomize_base() -> None:
    kinds = [o["kind"] for o in objects_for()]
    assert kinds == ["CustomResourceDefinition", "CustomResourceDefinition", "Namespace", "ServiceAccount",
                     "ClusterRole",
                     "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"]
    deployment = objects_for(image="registry.example/ctl:1")[-1]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "registry.example/ctl:1"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True and container["livenessProbe"]
    assert "--leader-elect" in container["args"]


def test_namespaced_variant_uses_the_same_rules_in_a_role() -> None:
    cluster = next(o for o in objects_for() if o["kind"] == "ClusterRole")
    namespaced = objects_for("namespaced", namespace="team-a")
    role = next(o for o in namespaced if o["kind"] == "Role" and o["metadata"]["namespace"] == "team-a")
    cluster_scoped = [r for r in cluster["rules"] if r["resources"] in (["nodes"], ["leases"])]
    assert len(cluster_scoped) == 2 and all(r["verbs"] == ["get"] for r in cluster_scoped)  # NodeLost, read only
    assert role["rules"] == [r for r in cluster["rules"] if r not in cluster_scoped]
    assert not any(o["kind"] in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition")
                   for o in namespaced)
    args = next(o for o in namespaced if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--watch-namespace=team-a" in args["args"]


def test_client_target_names_the_crd_and_finds_the_owner() -> None:
    from kubetrain.controller.crd import GROUP, KIND, PLURAL, VERSION
    from kubetrain.jobs.targets import TRAININGJOB, controlling_trainingjob
    from kubetrain.kube.objects import JOB_LABEL

    assert (TRAININGJOB.group, TRAININGJOB.version, TRAININGJOB.plural, TRAININGJOB.kind) == (
        GROUP, VERSION, PLURAL, KIND)
    assert TRAININGJOB.pod_label == JOB_LABEL
    ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": "digits", "controller": True}
    assert controlling_trainingjob({"metadata": {"ownerReferences": [ref]}}) == "digits"
    assert controlling_trainingjob({"metadata": {"ownerReferences": [{**ref, "controller": False}]}}) is None
    assert controlling_trainingjob({"metadata": {}}) is None
