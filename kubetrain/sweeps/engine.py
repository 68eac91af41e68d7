"""The search engine: the next trial's parameters, whether a running trial stops early, the best trial.

Pure: every decision is made from a `SweepState` (kubetrain.sweeps.state) and the spec's `sweep` section, and
changes nothing but that state, so whoever holds the state (a local sweep's file, a Sweep resource's status)
can make it, and the same state always gives the same decision. Random and TPE suggestions, and both early
stopping rules, are Optuna's: each decision rebuilds a study in memory from the state's trials
(`InMemoryStorage`, `add_trial`) with a sampler seeded from the search seed and the trial's number.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterator
from typing import Any, Literal

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState as OptunaState

from kubetrain.jobspec.sweep import Parameter, Sweep
from kubetrain.sweeps.state import SweepState, Trial

optuna.logging.set_verbosity(optuna.logging.WARNING)  # "A new study created in memory..." on every decision

_OPTUNA_STATES = {"running": OptunaState.RUNNING, "complete": OptunaState.COMPLETE,
                  "pruned": OptunaState.PRUNED, "failed": OptunaState.FAIL, "stopped": OptunaState.FAIL}
RESAMPLE_TRIES = 8  # draws that may repeat a trial before a discrete space is searched point by point


def distribution(param: Parameter) -> BaseDistribution:
    """The Optuna distribution of a parameter."""
    if param.choice is not None:
        return CategoricalDistribution(param.choice)
    if param.int_ is not None:
        return IntDistribution(param.int_[0], param.int_[1])
    if param.logUniform is not None:
        return FloatDistribution(param.logUniform[0], param.logUniform[1], log=True)
    assert param.uniform is not None
    return FloatDistribution(param.uniform[0], param.uniform[1])


def params_key(params: dict[str, Any]) -> str:
    """A trial's parameters as one comparable string (two trials with the same key are duplicates)."""
    return json.dumps(params, sort_keys=True)


class Engine:
    """Decisions for one sweep section; holds no state of its own."""

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep
        self.distributions = {p.name: distribution(p) for p in sweep.parameters}
        self.direction: Literal["minimize", "maximize"] = "minimize" if sweep.objective.goal == "min" else "maximize"

    # --- suggestions ------------------------------------------------------------------------------------------
    def suggest(self, state: SweepState, now: float | None = None) -> Trial | None:
        """Add the next trial (running) to `state` and return it; None when the sweep starts no more trials
        (count reached, space exhausted, too many failures, budget spent)."""
        if self.exhausted(state, now):
            return None
        params = self._new_params(state)
        if params is None:
            return None
        trial = Trial(len(state.trials), params, started=now)
        state.trials.append(trial)
        return trial

    def exhausted(self, state: SweepState, now: float | None = None) -> bool:
        """Whether no further trial may start."""
        budget = self.sweep.budget
        if len(state.trials) >= self.sweep.trial_count:
            return True
        if budget.maxFailedTrials is not None and state.count("failed") >= budget.maxFailedTrials:
            return True
        return self.out_of_time(state, now)

    def out_of_time(self, state: SweepState, now: float | None) -> bool:
        """Whether budget.maxSeconds has passed since the sweep started (never without a clock)."""
        seconds = self.sweep.budget.maxSeconds
        if seconds is None or now is None or state.started is None:
            return False
        return now - state.started >= seconds

    def _new_params(self, state: SweepState) -> dict[str, Any] | None:
        used = {params_key(t.params) for t in state.trials}
        if self.sweep.search.algorithm != "grid":
            study = self._study(state, self._sampler(len(state.trials)))
            for _ in range(RESAMPLE_TRIES):  # each ask adds a trial to this throw-away study: the next draw differs
                params = dict(study.ask(self.distributions).params)
                if params_key(params) not in used:
                    return params
            if self.sweep.grid_size is None:
                return None  # a continuous space that keeps repeating itself: nothing new to try
        return next((p for p in self._grid() if params_key(p) not in used), None)

    def _grid(self) -> Iterator[dict[str, Any]]:
        """Every point of a discrete space, the last parameter varying fastest; lazily (an int range may be
        large, and only the first unused points are needed)."""
        params = self.sweep.parameters
        for index in range(self.sweep.grid_size or 0):
            values, rest = {}, index
            for param in reversed(params):
                rest, digit = divmod(rest, param.size or 1)
                values[param.name] = param.value_at(digit)
            yield {p.name: values[p.name] for p in params}

    def _sampler(self, number: int) -> optuna.samplers.BaseSampler:
        # a fresh sampler per decision: seeded by the trial's number, or every rebuilt study would draw the same
        seed = zlib.crc32(f"{self.sweep.search.seed}/{number}".encode())
        if self.sweep.search.algorithm == "tpe":
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.sweep.search.startupTrials)
        return optuna.samplers.RandomSampler(seed=seed)

    # --- results ----------------------------------------------------------------------------------------------
    def report(self, state: SweepState, number: int, step: int, value: float) -> None:
        """An intermediate value of a running trial (the objective metric at `step`); non-finite values are
        kept out (a NaN loss is no evidence either way)."""
        trial = state.trial(number)
        if trial.state == "running" and math.isfinite(value):
            trial.intermediate[step] = value

    def should_prune(self, state: SweepState, number: int) -> bool:
        """Whether the running trial `number` should stop now (earlyStopping), from its intermediate values and
        the other trials'. The pruner's bookkeeping goes back into the state."""
        trial = state.trial(number)
        if self.sweep.earlyStopping is None or trial.state != "running" or not trial.intermediate:
            return False
        study = self._study(state, optuna.samplers.RandomSampler(seed=0))
        frozen = study.get_trials(deepcopy=False)[number]
        decision = bool(self._pruner().prune(study, frozen))
        trial.attrs = dict(study.get_trials(deepcopy=False)[number].system_attrs)
        return decision

    def finish(self, state: SweepState, number: int, outcome: str, now: float | None = None) -> Trial:
        """End a trial: `complete` (its value is the objective's last reported value; none reported makes it
        failed), `pruned`, `failed` or `stopped`."""
        trial = state.trial(number)
        trial.finished = now
        if outcome == "complete":
            last = max(trial.intermediate) if trial.intermediate else None
            trial.value = trial.intermediate[last] if last is not None else None
            outcome = "complete" if trial.value is not None else "failed"
        trial.state = outcome  # type: ignore[assignment]
        return trial

    def best(self, state: SweepState) -> Trial | None:
        """The complete trial with the best value (the lowest number among equals)."""
        done = [t for t in state.trials if t.state == "complete" and t.value is not None]
        sign = 1.0 if self.direction == "minimize" else -1.0
        return min(done, key=lambda t: (sign * (t.value or 0.0), t.number), default=None)

    # --- Optuna -----------------------------------------------------------------------------------------------
    def _pruner(self) -> optuna.pruners.BasePruner:
        rule = self.sweep.earlyStopping
        assert rule is not None
        if rule.rule == "median":
            return optuna.pruners.MedianPruner(n_startup_trials=rule.minTrials, n_warmup_steps=rule.warmupSteps)
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(rule.warmupSteps, 1),
                                                      reduction_factor=rule.reductionFactor)

    def _study(self, state: SweepState, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), sampler=sampler,
                                    pruner=optuna.pruners.NopPruner(), direction=self.direction)
        for trial in state.trials:
            study.add_trial(optuna.trial.create_trial(
                state=_OPTUNA_STATES[trial.state], params=trial.params, distributions=self.distributions,
                value=trial.value if trial.state == "complete" else None,
                intermediate_values=dict(trial.intermediate), system_attrs=dict(trial.attrs)))
        return study
