"""The `sweep` section of kubetrain.yaml: which parameters to search, how, for which objective, and when to stop
a trial early. Every field documents itself; `docs/spec.md` is generated from these."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, ValidationError, model_validator

from kubetrain.jobspec.sections import EnvName, Section, Train
from kubetrain.podenv import PARAMS_ENV

if TYPE_CHECKING:
    from kubetrain.jobspec.model import JobSpec

Scalar = str | int | float | bool
PARAM_NAME = re.compile(r"^(train\.)?[A-Za-z_][A-Za-z0-9_]{0,62}$")
TRAIN_PREFIX = "train."
"""The environment variable every trial's processes get: its parameters as one JSON object."""
MAX_TRIALS = 10000


class Parameter(Section):
    """One searched parameter: exactly one of `choice`, `uniform`, `logUniform` or `int`. Its value reaches the
    training code in the `KUBETRAIN_PARAMS` JSON object (and `kubetrain.runtime.trial_params()`), in the
    spec.train field it names (`train.lr`), and in `env` / `arg` when set."""

    name: Annotated[str, Field(pattern=PARAM_NAME.pattern)]
    """`train.<field>` sets that Trainer API field (e.g. `train.lr`, `train.batchSize`); any other name
    (e.g. `width`) only reaches the code through KUBETRAIN_PARAMS, `env` and `arg`."""
    choice: Annotated[list[Scalar], Field(min_length=1)] | None = None
    """One of these values, e.g. [16, 32, 64]."""
    uniform: Annotated[list[float], Field(min_length=2, max_length=2)] | None = None
    """A float drawn uniformly from [low, high]."""
    logUniform: Annotated[list[float], Field(min_length=2, max_length=2)] | None = None
    """A float drawn uniformly in log space from [low, high] (low > 0), e.g. a learning rate [1e-4, 1e-1]."""
    int_: Annotated[list[int], Field(min_length=2, max_length=2)] | None = Field(default=None, alias="int")
    """An integer from [low, high], both included."""
    env: EnvName | None = None
    """Also set this environment variable to the value (for plain scripts, spec.command)."""
    arg: Annotated[str, Field(min_length=1)] | None = None
    """Also append this argument and the value to spec.args, e.g. `--lr` gives `--lr 0.003`."""

    @model_validator(mode="after")
    def _one_kind(self) -> Parameter:
        kinds = [k for k in ("choice", "uniform", "logUniform", "int_") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("set exactly one of choice, uniform, logUniform, int"
                             + (f" (found {', '.join(k.rstrip('_') for k in kinds)})" if kinds else ""))
        bounds = self.uniform or self.logUniform or self.int_
        if bounds is not None and not bounds[0] < bounds[1]:
            raise ValueError(f"{kinds[0].rstrip('_')}: low ({bounds[0]}) must be below high ({bounds[1]})")
        if self.logUniform is not None and self.logUniform[0] <= 0:
            raise ValueError(f"logUniform: low ({self.logUniform[0]}) must be > 0")
        if self.choice is not None and len({repr(v) for v in self.choice}) != len(self.choice):
            raise ValueError("choice: values must be distinct")
        return self

    @property
    def size(self) -> int | None:
        """How many values a discrete parameter (choice, int) has, else None."""
        if self.choice is not None:
            return len(self.choice)
        return self.int_[1] - self.int_[0] + 1 if self.int_ is not None else None

    def value_at(self, index: int) -> Scalar:
        """A discrete parameter's value number `index` (0 <= index < size), in the order written."""
        return self.choice[index] if self.choice is not None else self.int_[0] + index  # type: ignore[index]

    @property
    def train_field(self) -> str | None:
        """The spec.train field this parameter sets (`lr` for `train.lr`), else None."""
        return self.name.removeprefix(TRAIN_PREFIX) if self.name.startswith(TRAIN_PREFIX) else None


class Objective(Section):
    """What a trial is judged by: a metric of its metrics lines (KUBETRAIN_METRICS), the runtime's own
    (`eval_accuracy`, `eval_loss`, `loss`) or your script's (any numeric field of a metrics line you print)."""

    metric: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")]
    """The metrics line field, e.g. eval_accuracy. Its last value is the trial's result; every value on the way
    is an intermediate value that early stopping compares (at the line's `step`)."""
    goal: Literal["min", "max"]
    """min (a loss) or max (an accuracy)."""


class Search(Section):
    """How parameters are chosen."""

    algorithm: Literal["grid", "random", "tpe"] = "tpe"
    """grid: every combination, in the order written (choice and int parameters only); random: independent
    draws; tpe: Optuna's Tree-structured Parzen Estimator, a model of the trials so far (random draws for the
    first `startupTrials`)."""
    seed: int = 0
    """Seed of random and tpe: the same spec and results give the same suggestions."""
    startupTrials: Annotated[int, Field(ge=1)] = 4
    """tpe: how many random trials before the model suggests."""


class Budget(Section):
    """When the sweep stops starting trials."""

    maxSeconds: Annotated[int, Field(ge=1)] | None = None
    """Start no trial after this many seconds since the sweep started; running trials are stopped then."""
    maxFailedTrials: Annotated[int, Field(ge=1)] | None = None
    """Stop the sweep after this many failed trials (a failed trial is not retried)."""


class EarlyStopping(Section):
    """Stop unpromising trials on their intermediate values (Optuna's pruners)."""

    rule: Literal["median", "halving"]
    """median: stop a trial whose value at a step is worse than the median of the finished trials' values at
    that step; halving: successive halving (keep the best 1/reductionFactor at each rung)."""
    warmupSteps: Annotated[int, Field(ge=0)] = 0
    """Never stop a trial at a step below this (median); the first rung's step (halving, default 1)."""
    minTrials: Annotated[int, Field(ge=0)] = 2
    """median: compare only once this many trials have finished."""
    reductionFactor: Annotated[int, Field(ge=2)] = 3
    """halving: the fraction of trials kept at each rung is 1/reductionFactor."""


class Sweep(Section):
    """A hyperparameter sweep over this job: `kubetrain sweep run` trains one trial per parameter set, this spec
    with the trial's values (docs/sweeps.md)."""

    parameters: Annotated[list[Parameter], Field(min_length=1)]
    """The searched parameters."""
    objective: Objective
    """The metric that ranks trials, and its goal."""
    search: Search = Field(default_factory=Search)
    """grid, random or tpe (Optuna)."""
    trials: Annotated[int, Field(ge=1, le=MAX_TRIALS)] | None = None
    """How many trials; default (grid only) every combination."""
    parallelism: Annotated[int, Field(ge=1, le=1000)] = 1
    """Trials running at once."""
    budget: Budget = Field(default_factory=Budget)
    """Wall-clock and failure limits."""
    earlyStopping: EarlyStopping | None = None
    """Stop bad trials early (their processes are stopped)."""

    @property
    def grid_size(self) -> int | None:
        """The number of points of an all-discrete space, else None (a continuous parameter)."""
        sizes = [size for p in self.parameters if (size := p.size) is not None]
        return math.prod(sizes, start=1) if len(sizes) == len(self.parameters) else None

    @property
    def trial_count(self) -> int:
        """trials, or the grid's size when unset (load refuses an unset count otherwise)."""
        return self.trials or self.grid_size or 1


def sweep_problems(sweep: Sweep, spec: JobSpec) -> list[tuple[str, str]]:
    """Every cross-field problem of the sweep section, as (field path, message)."""
    problems: list[tuple[str, str]] = []
    names = [p.name for p in sweep.parameters]
    for index, name in enumerate(names):
        if name in names[:index]:
            problems.append((f"sweep.parameters[{index}].name", f"{name} is already a parameter"))
    size = sweep.grid_size
    if sweep.search.algorithm == "grid" and size is None:
        continuous = next(i for i, p in enumerate(sweep.parameters) if p.size is None)
        problems.append((f"sweep.parameters[{continuous}]", "grid search needs choice or int parameters"))
    elif sweep.trials is None and size is not None and size > MAX_TRIALS:
        problems.append(("sweep.trials", f"the grid has {size} points: set trials (at most {MAX_TRIALS})"))
    elif sweep.trials is None and sweep.search.algorithm != "grid":
        problems.append(("sweep.trials", f"required with search.algorithm {sweep.search.algorithm}"))
    if sweep.trials is not None and size is not None and sweep.trials > size:
        problems.append(("sweep.trials", f"{sweep.trials} is more than the {size} distinct parameter sets"))
    for index, param in enumerate(sweep.parameters):
        problems += _target_problems(f"sweep.parameters[{index}]", param, spec)
    return problems


def _target_problems(field: str, param: Parameter, spec: JobSpec) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if param.env is not None and param.env in {s.name for s in spec.secretEnv}:
        problems.append((f"{field}.env", f"{param.env} is set by spec.secretEnv"))
    if param.env == PARAMS_ENV:
        problems.append((f"{field}.env", f"{PARAMS_ENV} is set by kubetrain (every parameter, as JSON)"))
    if param.arg is not None and spec.command is None:
        problems.append((f"{field}.arg", "needs spec.command (the Trainer API takes train.<field> parameters)"))
    target = param.train_field
    if target is None:
        return problems
    if spec.train is None:
        return [*problems, (f"{field}.name", "train.<field> needs spec.train (the Trainer API)")]
    if target not in Train.model_fields:
        return [*problems, (f"{field}.name", f"spec.train has no field {target!r}")]
    base = spec.train.model_dump(by_alias=True, exclude_unset=True)
    for value in _extremes(param):
        try:
            Train.model_validate({**base, target: value})
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            message = str(error["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")
            return [*problems, (f"{field}.name", f"spec.train.{target} cannot be {value!r}: {message}")]
    return problems


def _extremes(param: Parameter) -> list[Scalar]:
    """The values to try against the field's type: every choice, or a range's ends."""
    return list(param.choice or param.uniform or param.logUniform or param.int_ or [])
