"""spec.tracking in the manifests: each tracker's own variables, one run key per job and checkpoint directory,
the W&B key only as a Secret reference (never in a rendered object, the code ConfigMap, the image context or
`kubetrain run --dry-run`), and none of the trackers' clients imported by render or validate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.imagebuild.plan import assemble, plan_build
from kubetrain.jobspec.load import load_spec
from kubetrain.local.plan import RunOptions, build_plan
from kubetrain.render import RenderOptions, render_job
from tests.cli.imports import run_fresh

KEY_VALUE = "wandb-key-4f1e9c-never-in-a-manifest"
SPEC = """apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: digits, namespace: ml}
spec:
  image: repo/digits:1
  command: [python, train.py]
  code: {path: .}
  build: {variant: cpu}
  volumes: [{name: ckpt, claim: ckpt, mountPath: /ckpt}]
  checkpoint: {dir: /ckpt/digits}
  tracking:
    mlflow: {trackingUri: 'http://mlflow.mlflow:5000'}
    wandb: {project: digits, entity: acme, apiKeySecret: {name: wandb, key: api-key}}
    tensorboard: {logDir: /ckpt/tb}
    params: {width: 64}
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / ".env").write_text(f"WANDB_API_KEY={KEY_VALUE}\n")  # a key a user keeps beside the code:
    (tmp_path / ".dockerignore").write_text(".env\n")  # the code ConfigMap leaves it out; an image, if told
    path = tmp_path / "kubetrain.yaml"
    path.write_text(SPEC)
    return path


def container_env(obj: Any) -> list[dict[str, Any]]:
    """The first container env list in a PyTorchJob or TrainJob (every replica gets the same)."""
    if isinstance(obj, dict):
        if isinstance(obj.get("env"), list):
            return list(obj["env"])
        children = list(obj.values())
    else:
        children = list(obj) if isinstance(obj, list) else []
    for child in children:
        if found := container_env(child):
            return found
    return []


def plain(env: list[dict[str, Any]]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in env if "value" in item}


def test_each_trackers_own_variables_are_rendered(spec_file: Path) -> None:
    job = load_spec(spec_file).job
    env = container_env(render_job(job)[-1])
    values = plain(env)
    assert values["MLFLOW_TRACKING_URI"] == "http://mlflow.mlflow:5000"
    assert values["MLFLOW_EXPERIMENT_NAME"] == "digits"  # the job's name by default
    assert {k: values[k] for k in ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_GROUP", "WANDB_RESUME")} == {
        "WANDB_PROJECT": "digits", "WANDB_ENTITY": "acme", "WANDB_RUN_GROUP": "digits", "WANDB_RESUME": "allow"}
    assert values["WANDB_RUN_ID"] == values["KUBETRAIN_TRACKING_KEY"]
    assert values["TENSORBOARD_LOGDIR"] == "/ckpt/tb"
    assert [item for item in env if item["name"] == "WANDB_API_KEY"] == [
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}]
    config = json.loads(values["KUBETRAIN_TRACKING"])
    assert config["tags"]["kubetrain.namespace"] == "ml" and config["tags"]["kubetrain.image"] == "repo/digits:1"
    assert config["params"] == {"width": "64"} and config["spec"]["metadata"]["name"] == "digits"
    trainjob_env = plain(container_env(render_job(job, target="trainjob")[-1]))
    assert trainjob_env["WANDB_RUN_ID"] == values["WANDB_RUN_ID"]


def test_one_run_key_per_job_and_checkpoint_directory(spec_file: Path) -> None:
    job = load_spec(spec_file).job

    def key(options: RenderOptions) -> str:
        return plain(container_env(render_job(job, options)[-1]))["KUBETRAIN_TRACKING_KEY"]

    first = key(RenderOptions())
    assert key(RenderOptions()) == first  # a restart, a resume, a `continue` update: the same run
    assert key(RenderOptions(image="repo/digits:2")) == first
    assert key(RenderOptions(checkpoint_dir="/ckpt/digits/run-0a1b2c")) != first  # `recreate`: a new run
    assert key(RenderOptions(namespace="other")) != first
    assert key(RenderOptions(cluster="gke-prod")) != first


def test_a_local_run_key_names_its_local_checkpoint_directory(spec_file: Path, tmp_path: Path) -> None:
    loaded = load_spec(spec_file)

    def key(volume: Path) -> str:
        plan = build_plan(loaded, RunOptions(volumes=[f"ckpt={volume}"]), environ={}, cwd=tmp_path)
        return plan.nodes[0].env["KUBETRAIN_TRACKING_KEY"]

    assert key(tmp_path / "a") == key(tmp_path / "a") != key(tmp_path / "b")
    plan = build_plan(loaded, RunOptions(volumes=[f"ckpt={tmp_path / 'a'}"]), environ={}, cwd=tmp_path)
    assert json.loads(plan.nodes[0].env["KUBETRAIN_TRACKING"])["tensorboard"]["logDir"] == f"{tmp_path}/a/tb"


def test_the_api_key_is_in_no_object_configmap_image_context_or_dry_run(spec_file: Path, tmp_path: Path) -> None:
    environ = {**os.environ, "WANDB_API_KEY": KEY_VALUE}
    kubetrain = [sys.executable, "-m", "kubetrain"]
    outputs = []
    for argv in (["render", "-f", str(spec_file)], ["render", "-f", str(spec_file), "-o", "json"],
                 ["render", "-f", str(spec_file), "--target", "trainjob"],
                 ["render", "-f", str(spec_file), "--out", str(tmp_path / "out")],
                 ["run", "-f", str(spec_file), "--dry-run", "--volume", f"ckpt={tmp_path / 'v'}"]):
        result = subprocess.run([*kubetrain, *argv], env=environ, capture_output=True, text=True, timeout=120,
                                check=False)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout + result.stderr)
    rendered = yaml.safe_load_all(outputs[0])
    assert "ConfigMap" in [doc["kind"] for doc in rendered]  # the code ConfigMap was searched too
    outputs += [path.read_text() for path in (tmp_path / "out").iterdir()]
    staged = tmp_path / "image-context"
    assemble(plan_build(load_spec(spec_file)), staged)
    outputs += [path.read_bytes().decode(errors="replace") for path in staged.rglob("*") if path.is_file()]
    requirements = next(staged.rglob("runtime-requirements.txt")).read_text().splitlines()
    assert {"mlflow-skinny>=3.0", "wandb>=0.31,<0.32", "tensorboard>=2.16"} <= set(requirements)  # the clients
    assert "WANDB_API_KEY" in outputs[0]  # the reference is there...
    assert all(KEY_VALUE not in text for text in outputs)  # ...the value nowhere


def test_render_and_validate_import_no_tracker_client(spec_file: Path) -> None:
    result = run_fresh(["render", "-f", str(spec_file)], {"mlflow", "wandb", "tensorboard", "torch"})
    assert result.exit_code == 0, result.stderr[-2000:]
    assert result.loaded == [], result.stderr[-2000:]
