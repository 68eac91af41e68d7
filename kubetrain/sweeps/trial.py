"""A trial's kubetrain.yaml: the sweep's job with one parameter set applied, as a plain spec (no `sweep`).

A parameter reaches the training code in every way the spec offers: `train.<field>` sets that Trainer API
field, every parameter is in the `KUBETRAIN_PARAMS` JSON object (spec.env), `env` sets a variable of its own
and `arg` appends `--flag value` to spec.args (plain scripts, spec.command).

A trial is labelled with its sweep and number, and its tracker runs are grouped under the sweep: MLflow's
experiment and W&B's group default to the sweep's name, TensorBoard's event files go to
`<logDir>/<sweep>/trial-<N>`, and the trial's parameters are its run's parameters (`tracking.params`).
"""

from __future__ import annotations

import json
from typing import Any

from kubetrain.jobspec.load import validate_data
from kubetrain.jobspec.model import TrainingJob
from kubetrain.jobspec.sweep import Sweep
from kubetrain.kube.objects import SWEEP_LABEL, TRIAL_LABEL
from kubetrain.podenv import PARAMS_ENV

PROMOTED = "promoted"


def trial_name(sweep_name: str, number: int) -> str:
    """The trial's job name: the sweep's name and its number, so a restart finds the same trial again."""
    return f"{sweep_name}-t{number}"


def trial_document(job: TrainingJob, params: dict[str, Any], number: int | None) -> dict[str, Any]:
    """The trial's spec as the data of a kubetrain.yaml. `number` None: the promoted spec (the job's own name
    and checkpoint directory); else the trial's name, and a checkpoint directory of its own below the job's
    (a trial must never resume from another trial's checkpoint)."""
    sweep = job.sweep
    assert sweep is not None
    data = job.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude={"sweep"})
    spec = data["spec"]
    if number is not None:
        metadata = data["metadata"]
        metadata["name"] = trial_name(job.metadata.name, number)
        metadata["labels"] = {**(metadata.get("labels") or {}), SWEEP_LABEL: job.metadata.name,
                              TRIAL_LABEL: str(number)}
        if job.spec.checkpoint.dir:
            spec.setdefault("checkpoint", {})["dir"] = f"{job.spec.checkpoint.dir.rstrip('/')}/trial-{number}"
        if spec.get("tracking"):
            _group_runs(spec["tracking"], job.metadata.name, number, params)
    _apply(sweep, params, spec)
    return data


def _group_runs(tracking: dict[str, Any], sweep_name: str, number: int, params: dict[str, Any]) -> None:
    """The trial's tracker runs under the sweep: one MLflow experiment, one W&B group, one TensorBoard folder
    per trial below the sweep's, the trial's parameters as the run's."""
    if "mlflow" in tracking:
        tracking["mlflow"].setdefault("experiment", sweep_name)
    if "wandb" in tracking:
        tracking["wandb"].setdefault("group", sweep_name)
    if "tensorboard" in tracking:
        board = tracking["tensorboard"]
        board["logDir"] = f"{board['logDir'].rstrip('/')}/{sweep_name}/trial-{number}"
    tracking["params"] = {**(tracking.get("params") or {}), **{name: _text(v) for name, v in params.items()}}


def _apply(sweep: Sweep, params: dict[str, Any], spec: dict[str, Any]) -> None:
    env = spec.setdefault("env", {})
    env[PARAMS_ENV] = json.dumps(params, sort_keys=True, separators=(",", ":"))
    for param in sweep.parameters:
        value = params[param.name]
        if param.train_field is not None:
            spec["train"][param.train_field] = value
        if param.env is not None:
            env[param.env] = _text(value)
        if param.arg is not None:
            spec.setdefault("args", []).extend([param.arg, _text(value)])


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def trial_job(job: TrainingJob, params: dict[str, Any], number: int | None, source: str) -> TrainingJob:
    """The trial's spec, validated like any kubetrain.yaml (a SpecError names the field)."""
    return validate_data(trial_document(job, params, number), {}, source)
