"""A trial's kubetrain.yaml: the sweep's job with one parameter set applied, as a plain spec (no `sweep`).

A parameter reaches the training code in every way the spec offers: `train.<field>` sets that Trainer API
field, every parameter is in the `KUBETRAIN_PARAMS` JSON object (spec.env), `env` sets a variable of its own
and `arg` appends `--flag value` to spec.args (plain scripts, spec.command).
"""

from __future__ import annotations

import json
from typing import Any

from kubetrain.jobspec.load import validate_data
from kubetrain.jobspec.model import TrainingJob
from kubetrain.jobspec.sweep import Sweep
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
        data["metadata"]["name"] = trial_name(job.metadata.name, number)
        if job.spec.checkpoint.dir:
            spec.setdefault("checkpoint", {})["dir"] = f"{job.spec.checkpoint.dir.rstrip('/')}/trial-{number}"
    _apply(sweep, params, spec)
    return data


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
