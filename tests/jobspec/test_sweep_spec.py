"""The `sweep` section of kubetrain.yaml: its fields, every problem at once with file:line and field, and the trial
specs it makes (how a parameter reaches the Trainer API's config and a plain script)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kubetrain.errors import SpecError
from kubetrain.jobspec.load import LoadedSpec, parse_spec
from kubetrain.render import render_warnings
from kubetrain.render.context import RenderOptions, spec_hash
from kubetrain.render.loaded import render_loaded
from kubetrain.sweeps.trial import trial_job

TRAINER = textwrap.dedent("""\
    apiVersion: kubetrain.dev/v1alpha1
    kind: TrainingJob
    metadata: {name: digits}
    spec:
      image: ghcr.io/acme/digits:1.0
      checkpoint: {dir: /ckpt/digits}
      volumes: [{name: ckpt, claim: ckpt, mountPath: /ckpt}]
      train: {model: "m:model", dataset: "m:data", lr: 0.003}
    sweep:
      parameters:
        - {name: train.lr, logUniform: [0.0001, 0.1]}
        - {name: train.batchSize, choice: [16, 32]}
        - {name: width, int: [8, 32], env: WIDTH}
      objective: {metric: eval_accuracy, goal: max}
      trials: 6
      parallelism: 2
      earlyStopping: {rule: median}
    """)
SCRIPT = textwrap.dedent("""\
    apiVersion: kubetrain.dev/v1alpha1
    kind: TrainingJob
    metadata: {name: script}
    spec:
      image: ghcr.io/acme/digits:1.0
      command: [python, train.py]
      args: [--epochs, "3"]
    sweep:
      search: {algorithm: grid}
      parameters:
        - {name: lr, choice: [0.1, 0.01], arg: --lr}
        - {name: depth, int: [1, 3], env: DEPTH}
      objective: {metric: val_loss, goal: min}
    """)


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "kubetrain.yaml")
    return info.value.lines()


def test_a_sweep_section_loads_with_its_defaults() -> None:
    sweep = parse_spec(TRAINER).sweep
    assert sweep is not None
    assert sweep.search.algorithm == "tpe" and sweep.trial_count == 6 and sweep.parallelism == 2
    assert [p.name for p in sweep.parameters] == ["train.lr", "train.batchSize", "width"]
    assert sweep.parameters[2].size == 25 and sweep.parameters[2].value_at(24) == 32
    grid = parse_spec(SCRIPT).sweep
    assert grid is not None and grid.grid_size == 6 and grid.trial_count == 6  # every combination by default


def test_every_problem_of_a_sweep_at_once_with_its_line() -> None:
    bad = (TRAINER.replace("logUniform: [0.0001, 0.1]", "logUniform: [0, 0.1]")
           .replace("choice: [16, 32]", "choice: [16, 16]")
           .replace("int: [8, 32], env: WIDTH", "int: [8, 32], uniform: [1, 2]")
           .replace("goal: max", "goal: maximum")
           .replace("parallelism: 2", "parallelism: 0")
           .replace("rule: median", "rule: mean"))
    assert problems(bad) == [
        "kubetrain.yaml:11: sweep.parameters[0]: logUniform: low (0.0) must be > 0",
        "kubetrain.yaml:12: sweep.parameters[1]: choice: values must be distinct",
        "kubetrain.yaml:13: sweep.parameters[2]: set exactly one of choice, uniform, logUniform, int (found uniform, "
        "int)",
        "kubetrain.yaml:14: sweep.objective.goal: must be one of 'min' or 'max' (got 'maximum')",
        "kubetrain.yaml:16: sweep.parallelism: must be >= 1",
        "kubetrain.yaml:17: sweep.earlyStopping.rule: must be one of 'median' or 'halving' (got 'mean')",
    ]


def test_cross_field_problems_name_the_parameter() -> None:
    bad = (TRAINER.replace("name: train.batchSize, choice: [16, 32]", "name: train.batchSize, choice: [16, 0]")
           .replace("name: width, int: [8, 32], env: WIDTH", "name: train.widht, int: [8, 32], arg: --width")
           .replace("  trials: 6\n", ""))
    assert problems(bad) == [
        "kubetrain.yaml:9: sweep.trials: required with search.algorithm tpe",
        "kubetrain.yaml:12: sweep.parameters[1].name: spec.train.batchSize cannot be 0: must be greater than or "
        "equal to 1",
        "kubetrain.yaml:13: sweep.parameters[2].arg: needs spec.command (the Trainer API takes train.<field> "
        "parameters)",
        "kubetrain.yaml:13: sweep.parameters[2].name: spec.train has no field 'widht'",
    ]
    grid = SCRIPT.replace("name: depth, int: [1, 3]", "name: depth, uniform: [1, 3]")
    assert problems(grid) == ["kubetrain.yaml:12: sweep.parameters[1]: grid search needs choice or int parameters"]
    too_many = SCRIPT.replace("objective:", "trials: 7\n  objective:")
    assert problems(too_many) == ["kubetrain.yaml:13: sweep.trials: 7 is more than the 6 distinct parameter sets"]
    huge = SCRIPT.replace("int: [1, 3]", "int: [1, 1000000000]")  # counted, never listed
    assert problems(huge) == [
        "kubetrain.yaml:8: sweep.trials: the grid has 2000000000 points: set trials (at most 10000)"]
    assert parse_spec(huge.replace("objective:", "trials: 5\n  objective:")).sweep is not None
    no_trainer = SCRIPT.replace("name: lr,", "name: train.lr,")
    assert problems(no_trainer) == [
        "kubetrain.yaml:11: sweep.parameters[0].name: train.<field> needs spec.train (the Trainer API)"]


def test_a_trial_gets_its_parameters_in_the_trainer_config_env_and_args() -> None:
    job = parse_spec(TRAINER)
    params = {"train.lr": 0.01, "train.batchSize": 32, "width": 12}
    trial = trial_job(job, params, 3, "trial")
    assert trial.sweep is None and trial.metadata.name == "digits-t3"
    assert trial.spec.train is not None and (trial.spec.train.lr, trial.spec.train.batchSize) == (0.01, 32)
    assert trial.spec.checkpoint.dir == "/ckpt/digits/trial-3"  # never another trial's checkpoint
    assert json.loads(trial.spec.env["KUBETRAIN_PARAMS"]) == params and trial.spec.env["WIDTH"] == "12"
    promoted = trial_job(job, params, None, "promoted")
    assert promoted.metadata.name == "digits" and promoted.spec.checkpoint.dir == "/ckpt/digits"
    script = trial_job(parse_spec(SCRIPT), {"lr": 0.01, "depth": 2}, 0, "trial")
    assert script.spec.args == ["--epochs", "3", "--lr", "0.01"] and script.spec.env["DEPTH"] == "2"


def test_a_trials_tracker_runs_are_grouped_under_the_sweep() -> None:
    tracked = TRAINER.replace("  train: {", "  tracking:\n"
                              "    mlflow: {trackingUri: http://mlflow:5000}\n"
                              "    wandb: {project: digits}\n"
                              "    tensorboard: {logDir: /ckpt/tb}\n"
                              "    params: {team: vision}\n"
                              "  train: {")
    job = parse_spec(tracked)
    trial = trial_job(job, {"train.lr": 0.01, "train.batchSize": 32, "width": 12}, 3, "trial")
    manifests = render_loaded(LoadedSpec(trial, "kubetrain.yaml", Path("."), {}), target="pytorchjob")
    container = manifests[-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["MLFLOW_EXPERIMENT_NAME"], env["WANDB_RUN_GROUP"], env["TENSORBOARD_LOGDIR"]) == (
        "digits", "digits", "/ckpt/tb/digits/trial-3")
    config = json.loads(env["KUBETRAIN_TRACKING"])
    assert config["runName"] == "digits-t3"
    assert {k: config["tags"][k] for k in ("kubetrain.sweep", "kubetrain.trial")} == {
        "kubetrain.sweep": "digits", "kubetrain.trial": "3"}
    assert config["params"] == {"team": "vision", "train.lr": "0.01", "train.batchSize": "32", "width": "12"}
    promoted = trial_job(job, {"train.lr": 0.01, "train.batchSize": 32, "width": 12}, None, "promoted")
    assert promoted.spec.tracking is not None and promoted.spec.tracking.mlflow is not None
    assert promoted.spec.tracking.mlflow.experiment is None and "kubetrain.dev/sweep" not in promoted.metadata.labels


def test_a_sweep_leaves_the_rendered_job_as_it_was_and_says_so() -> None:
    without = TRAINER.split("sweep:")[0]
    options = RenderOptions()
    assert spec_hash(parse_spec(TRAINER), options) == spec_hash(parse_spec(without), options)
    assert render_loaded(LoadedSpec(parse_spec(TRAINER), "k", Path())) == render_loaded(
        LoadedSpec(parse_spec(without), "k", Path()))
    assert render_warnings(parse_spec(TRAINER)) == [
        "sweep: left out: this is the spec as written, one job; `kubetrain sweep run` runs the sweep's trials "
        "(docs/sweeps.md)"]
    assert render_warnings(parse_spec(without)) == []
