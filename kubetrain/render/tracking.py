"""The environment of `spec.tracking`: what kubetrain's runtime reads, and what each tracker's own client reads,
so `mlflow.start_run()`, `wandb.init()` and `SummaryWriter(os.environ["TENSORBOARD_LOGDIR"])` in a plain script
join the job's run. Secrets only as references: the W&B key is a secretKeyRef, never a value."""

from __future__ import annotations

import json
from typing import Any

from kubetrain.jobspec.model import TrainingJob
from kubetrain.jobspec.trackingenv import RunIdentity
from kubetrain.kube.objects import SWEEP_LABEL, TRIAL_LABEL
from kubetrain.podenv import RUN_KEY_ENV, TENSORBOARD_ENV, TRACKING_ENV, WANDB_KEY_ENV

__all__ = ["RUN_KEY_ENV", "RunIdentity", "tracking_env", "tracking_secret_env"]


def tracking_env(job: TrainingJob, identity: RunIdentity, tags: dict[str, str]) -> dict[str, str]:
    """Plain variables for the tracking section (empty without one)."""
    tracking = job.spec.tracking
    if tracking is None:
        return {}
    key = identity.key
    values: dict[str, str] = {RUN_KEY_ENV: key}
    config: dict[str, Any] = {
        **tracking.model_dump(mode="json", by_alias=True, exclude_none=True),
        "runName": job.metadata.name, "job": f"{identity.namespace}/{identity.name}",
        "tags": {**tags, "kubetrain.cluster": identity.cluster, "kubetrain.namespace": identity.namespace,
                 "kubetrain.job": job.metadata.name, **_sweep_tags(job)},
        "spec": job.model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    values[TRACKING_ENV] = json.dumps(config, sort_keys=True, separators=(",", ":"))
    if tracking.mlflow:
        values["MLFLOW_TRACKING_URI"] = tracking.mlflow.trackingUri
        values["MLFLOW_EXPERIMENT_NAME"] = tracking.mlflow.experiment or job.metadata.name
    if tracking.wandb:
        wandb = tracking.wandb
        values.update({"WANDB_PROJECT": wandb.project, "WANDB_RUN_GROUP": wandb.group or job.metadata.name,
                       "WANDB_RUN_ID": key, "WANDB_RESUME": "allow", "WANDB_NAME": job.metadata.name,
                       **({"WANDB_ENTITY": wandb.entity} if wandb.entity else {})})
    if tracking.tensorboard:
        values[TENSORBOARD_ENV] = tracking.tensorboard.logDir
    return values


def _sweep_tags(job: TrainingJob) -> dict[str, str]:
    """A sweep's trial (kubetrain.sweeps.trial labels it): its run is tagged with the sweep and its number."""
    labels = job.metadata.labels
    if SWEEP_LABEL not in labels:
        return {}
    return {"kubetrain.sweep": labels[SWEEP_LABEL], "kubetrain.trial": labels.get(TRIAL_LABEL, "")}


def tracking_secret_env(job: TrainingJob) -> list[dict[str, Any]]:
    """The W&B API key as a secretKeyRef (the value stays in the Secret)."""
    wandb = job.spec.tracking.wandb if job.spec.tracking else None
    if wandb is None or wandb.apiKeySecret is None:
        return []
    ref = {"name": wandb.apiKeySecret.name, "key": wandb.apiKeySecret.key}
    return [{"name": WANDB_KEY_ENV, "valueFrom": {"secretKeyRef": ref}}]
