"""spec.tracking: loaded, defaulted and checked like every other section (one line per problem, with its line)."""

from __future__ import annotations

import pytest

from kubetrain.errors import SpecError
from kubetrain.jobspec.load import parse_spec

BASE = """apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: digits}
spec:
  image: repo/x:1
  command: [python, train.py]
  tracking:
"""


def problems(tracking: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(BASE + tracking, "kubetrain.yaml")
    return info.value.lines()


def test_defaults() -> None:
    job = parse_spec(BASE + "    mlflow: {trackingUri: 'http://mlflow:5000'}\n")
    assert job.spec.tracking is not None and job.spec.tracking.mlflow is not None
    assert job.spec.tracking.mlflow.experiment is None  # the job's name, at render time
    assert job.spec.tracking.params == {} and job.spec.tracking.bufferPoints == 100_000
    assert job.spec.tracking.wandb is None and job.spec.tracking.tensorboard is None


@pytest.mark.parametrize(("tracking", "expected"), [
    ("    {}\n", "kubetrain.yaml:7: spec.tracking: set at least one of mlflow, wandb, tensorboard"),
    ("    mlflow: {trackingUri: 'mlflow:5000'}\n",
     "kubetrain.yaml:8: spec.tracking.mlflow.trackingUri: 'mlflow:5000' is not a tracking URI; use "
     "http://HOST:PORT, https://..., databricks, or an absolute path"),
    ("    mlflow: {}\n", "kubetrain.yaml:8: spec.tracking.mlflow.trackingUri: required field is missing"),
    ("    wandb: {project: a/b}\n",
     "kubetrain.yaml:8: spec.tracking.wandb.project: 'a/b' must be 1-128 characters without / \\ # ? % : or "
     "spaces"),
    ("    wandb:\n      project: p\n      apiKey: abc\n",
     "kubetrain.yaml:10: spec.tracking.wandb.apiKey: unknown field; did you mean 'apiKeySecret'?"),
    ("    wandb: {project: p, apiKeySecret: {name: Bad_Name, key: k}}\n",
     "kubetrain.yaml:8: spec.tracking.wandb.apiKeySecret.name: "),
    ("    tensorboard: {logDir: tb}\n",
     "kubetrain.yaml:8: spec.tracking.tensorboard.logDir: 'tb' must be an absolute path without ':' or '..'"),
    ("    tensorboard: {logDir: 'ftp://x/tb'}\n",
     "kubetrain.yaml:8: spec.tracking.tensorboard.logDir: ftp:// is not a supported store; use a path or one of "),
])
def test_problems_name_the_field_and_line(tracking: str, expected: str) -> None:
    found = problems(tracking)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_the_wandb_key_comes_from_one_place() -> None:
    text = BASE.replace("  tracking:\n", "  env: {WANDB_API_KEY: x}\n  tracking:\n")
    with pytest.raises(SpecError) as info:
        parse_spec(text + "    wandb: {project: p, apiKeySecret: {name: wandb, key: k}}\n", "kubetrain.yaml")
    assert info.value.lines() == [
        "kubetrain.yaml:7: spec.env.WANDB_API_KEY: WANDB_API_KEY is also set by spec.tracking.wandb.apiKeySecret"]
