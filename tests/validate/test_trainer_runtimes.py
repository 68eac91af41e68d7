"""The runtimes the pinned Trainer v2.3.0 ships (kubetrain/rules/runtimes.py): a TrainJob's runtimePatches
and trainer.env are checked against the runtime it names; the table matches the upstream runtime manifests
where `make testenv` copies them (torch-distributed), and tests/validate/test_oracle.py checks the
torch-distributed verdicts against the real Trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.fieldpath import join_path
from kubetrain.rules.k8s.check import k8s_findings
from kubetrain.rules.runtimes import RUNTIMES
from kubetrain.validate.operators import trainjob_webhook
from tests.testenv.reference import trainer_dir
from tests.validate import oracle

Obj = dict[str, Any]
PATCH = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"


def _trainjob(runtime: str, job: str | None = None, container: Obj | None = None, env: list[str] = ()) -> Obj:
    obj = oracle.bases()["TrainJob"]
    obj["spec"]["runtimeRef"]["name"] = runtime
    obj["spec"]["trainer"]["env"] = [{"name": name, "value": "1"} for name in env]
    if job is not None:
        obj["spec"]["runtimePatches"] = [{"manager": "kubetrain.dev/kubetrain", "trainingRuntimeSpec": {"template": {
            "spec": {"replicatedJobs": [{"name": job, "template": {"spec": {"template": {"spec": {
                "containers": [container or {"name": "node"}]}}}}}]}}}}]
    return obj


def _errors(obj: Obj) -> set[str]:
    findings = [*trainjob_webhook(obj), *k8s_findings(obj)]
    return {join_path(f.path) for f in findings if f.severity == "error"}


@pytest.mark.parametrize(("runtime", "job", "ok"), [
    ("deepspeed-distributed", "launcher", True), ("mlx-distributed", "launcher", True),
    ("deepspeed-distributed", "worker", False), ("torch-distributed", "launcher", False),
    ("torchtune-llama3.2-1b", "model-initializer", True), ("torch-distributed-with-cache", "dataset-initializer", True),
    ("torch-distributed-with-cache", "model-initializer", False), ("xgboost-distributed", "node", True),
    ("jax-distributed", "launcher", False),
])
def test_patches_name_the_runtime_jobs(runtime: str, job: str, ok: bool) -> None:
    assert (f"{PATCH}.name" not in _errors(_trainjob(runtime, job))) == ok


def test_a_launcher_runs_a_container_named_node() -> None:
    container = f"{PATCH}.template.spec.template.spec.containers[0].name"
    assert container not in _errors(_trainjob("deepspeed-distributed", "launcher", {"name": "node"}))
    assert container in _errors(_trainjob("deepspeed-distributed", "launcher", {"name": "launcher"}))


@pytest.mark.parametrize(("runtime", "env", "rejected"), [
    ("torch-distributed", "PET_NNODES", True), ("xgboost-distributed", "PET_NNODES", False),
    ("xgboost-distributed", "DMLC_TASK_ID", True), ("deepspeed-distributed", "OMPI_MCA_plm_rsh_args", True),
    ("mlx-distributed", "PET_MASTER_ADDR", False), ("jax-distributed", "PET_NNODES", False),
    ("my-own-runtime", "PET_NNODES", True),  # not shipped: kubetrain's torch runtimes' names apply
])
def test_reserved_env_follows_the_runtime_plugin(runtime: str, env: str, rejected: bool) -> None:
    assert ("spec.trainer.env" in _errors(_trainjob(runtime, env=[env]))) == rejected


@pytest.mark.parametrize(("runtime", "rejected"), [
    ("torch-distributed", True), ("xgboost-distributed", False), ("torchtune-llama3.2-1b", False)])
def test_patch_mounts_need_a_volume_where_the_runtime_has_none(runtime: str, rejected: bool) -> None:
    """torch-distributed's pods have no volumes; torchtune's mount `initializer`, which the Trainer adds, and
    the others' volumes are not known offline."""
    mount = {"name": "node", "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]}
    field = f"{PATCH}.template.spec.template.spec.containers[0].volumeMounts[0].name"
    assert (field in _errors(_trainjob(runtime, "node", mount))) == rejected


def test_the_torch_distributed_entry_matches_the_pinned_manifest(reference_dir: Path) -> None:
    runtime = yaml.safe_load((trainer_dir(reference_dir) / "torch_distributed.yaml").read_text())
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    shape = {j["name"]: frozenset(c["name"] for c in j["template"]["spec"]["template"]["spec"]["containers"])
             for j in jobs}
    volumes = {v["name"] for j in jobs for v in j["template"]["spec"]["template"]["spec"].get("volumes", [])}
    assert shape == RUNTIMES["torch-distributed"].jobs
    assert volumes == RUNTIMES["torch-distributed"].volumes


@pytest.mark.parametrize(("field", "value", "path"), [
    ("env", [{"name": "", "value": "v"}], "spec.trainer.env[0].name"),
    ("resourcesPerNode", {"limits": {"gpu": 2}}, "spec.trainer.resourcesPerNode.limits.gpu"),
    ("resourcesPerNode", {"limits": {"a/b/c": "500m"}}, 'spec.trainer.resourcesPerNode.limits["a/b/c"]'),
    ("resourcesPerNode", {"limits": {"nvidia.com/gpu": "0.5"}},
     'spec.trainer.resourcesPerNode.limits["nvidia.com/gpu"]'),
    ("image", " pytorch/pytorch:2.13.0", "spec.trainer.image"),
    ("numNodes", 100_001, "spec.trainer.numNodes"),
])
def test_the_trainer_fields_follow_the_container_rules(field: str, value: Any, path: str) -> None:
    """The Trainer copies them into the node container; benchmarks/bench_validate_oracle.py found the first
    three passing offline while the real Trainer's Job and pods were refused."""
    obj = oracle.bases()["TrainJob"]
    obj["spec"]["trainer"][field] = value
    assert path in _errors(obj)
    assert "the Trainer's JobSet would fail to create its pods" in str([f.message for f in k8s_findings(obj)])
