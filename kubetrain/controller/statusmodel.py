"""The status the controller writes on a TrainingJob: one typed model, also the CRD's status schema."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Phase = Literal["Pending", "Invalid", "Created", "Queued", "Running", "Restarting", "Suspended", "Succeeded",
                "Failed"]


class _Status(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Condition(_Status):
    """A condition, as in every Kubernetes status."""

    type: str
    """Valid, Queued, Admitted, Running, Succeeded, Failed, SpecChanged, Hung, Straggler, Diverged or NodeLost."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str
    """One CamelCase word saying why."""
    message: str = ""
    """The same one-line message(s) the CLI prints, separated by '; '."""
    lastTransitionTime: str
    """When status last changed (RFC 3339)."""
    observedGeneration: int | None = None
    """The TrainingJob generation this condition was computed from."""


class ChildRef(_Status):
    """An object the controller created for this TrainingJob."""

    apiVersion: str
    """API version of the child."""
    kind: str
    """PyTorchJob, TrainJob or ConfigMap."""
    name: str
    """Name of the child (in the TrainingJob's namespace)."""


class ReplicaCounts(_Status):
    """Pod counts of one replica type, copied from the child's status."""

    active: int = 0
    """Running pods."""
    succeeded: int = 0
    """Succeeded pods."""
    failed: int = 0
    """Failed pods."""


class Progress(_Status):
    """Live progress from the runtime's KUBETRAIN_METRICS lines (the tail of rank 0's log)."""

    step: int | None = None
    """Optimizer step of the last metrics line."""
    totalSteps: int | None = None
    """Total optimizer steps, when known."""
    stepText: str | None = None
    """step/total, for `kubectl get` (printer column)."""
    loss: str | None = None
    """Training loss of the last metrics line (a string, as printer columns and merge patches keep it exact);
    nan, inf or -inf once the loss diverged."""
    samplesPerSecond: float | None = None
    """Throughput of the last metrics line."""
    eta: str | None = None
    """Estimated time left, from the step rate between two reads."""
    evalAccuracy: float | None = None
    """Held-out accuracy of the last eval record."""
    line: str | None = None
    """The progress line `kubetrain logs -f` shows."""
    diverged: str | None = None
    """`diverged at step N: loss nan` once a loss or held-out loss was NaN or infinite (spec.divergence)."""
    updateTime: str | None = None
    """When this progress was read (RFC 3339)."""


class HangRestarts(_Status):
    """What spec.hang.policy restart did in the cluster (docs/hangs.md)."""

    restarts: int = 0
    """Times the controller deleted the pods of this hung job so that they resume from the last checkpoint."""
    lastRestartTime: str | None = None
    """When it last did (RFC 3339)."""
    lastRestartStep: int | None = None
    """The step the job was hung at then."""


class TrackedRun(_Status):
    """The job's run in its experiment trackers (spec.tracking), from rank 0's `tracking` metrics record."""

    runURL: str | None = None
    """The run's page (the first tracker's that has one: MLflow, then Weights & Biases)."""
    runs: dict[str, str] = Field(default_factory=dict)
    """Each tracker's run page, by tracker name."""


class TrialObjective(_Status):
    """A sweep's trial: its objective metric as read from rank 0's metrics lines (docs/sweeps.md)."""

    metric: str
    """The sweep's objective.metric (the trial's kubetrain.dev/sweep-objective annotation)."""
    step: int
    """The step of the last value."""
    value: float
    """The last value: the trial's result once it ended."""
    intermediate: list[list[float]] = Field(default_factory=list)
    """[step, value] of every value read (the latest 500), for early stopping."""


class TrainingJobStatus(_Status):
    """What the controller observed and did, mirrored from the child job."""

    phase: Phase = "Pending"
    """One word: Pending, Invalid, Created, Queued, Running, Restarting, Suspended, Succeeded or Failed."""
    target: str | None = None
    """The resolved target: pytorchjob or trainjob."""
    observedGeneration: int | None = None
    """The TrainingJob generation the controller last reconciled."""
    specHash: str | None = None
    """Hash of the rendered spec the child was created from (kubetrain.dev/spec-hash)."""
    conditions: list[Condition] = Field(default_factory=list)
    """Valid, Queued/Admitted (with Kueue), Running, Succeeded/Failed, SpecChanged, Hung, Straggler, Diverged,
    NodeLost."""
    replicas: dict[str, ReplicaCounts] = Field(default_factory=dict)
    """Pod counts per replica type (Master, Worker, or the TrainJob's jobs)."""
    startTime: str | None = None
    """When the child job started."""
    completionTime: str | None = None
    """When the child job finished."""
    children: list[ChildRef] = Field(default_factory=list)
    """The PyTorchJob or TrainJob, and the code ConfigMap."""
    checkpointDir: str | None = None
    """Where the child checkpoints: spec.checkpoint.dir, or a run-SPECHASH directory under it for a child
    recreated with a fresh start (update policy recreate)."""
    progress: Progress | None = None
    """Live progress while running."""
    tracking: TrackedRun | None = None
    """The job's tracked run (spec.tracking): kept once known."""
    hang: HangRestarts | None = None
    """Restarts of a hung job by spec.hang.policy restart."""
    objective: TrialObjective | None = None
    """A sweep's trial only: its objective metric's values."""
