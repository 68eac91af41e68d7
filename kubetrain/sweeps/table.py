"""A sweep's results as rows (trial, parameters, state, step, objective, best so far, ETA), as a text table and as
data (-o json|yaml). Pure: from the state and the sweep section."""

from __future__ import annotations

from typing import Any

from kubetrain.jobspec.sweep import Sweep
from kubetrain.sweeps.state import SweepState, Trial

HEADERS = ("TRIAL", "PARAMETERS", "STATE", "STEP", "OBJECTIVE", "BEST SO FAR", "ETA")


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _params(params: dict[str, Any]) -> str:
    return " ".join(f"{name.removeprefix('train.')}={_number(v) if isinstance(v, float) else v}"
                    for name, v in params.items())


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def trial_eta(trial: Trial, now: float | None) -> float | None:
    """Seconds left for a running trial, from its steps so far and its total (None when unknown)."""
    if trial.state != "running" or now is None or trial.started is None or not trial.step or not trial.total_steps:
        return None
    return (now - trial.started) / trial.step * (trial.total_steps - trial.step)


def objective(trial: Trial) -> float | None:
    """The trial's result, or its latest intermediate value while it has none."""
    if trial.value is not None:
        return trial.value
    return trial.intermediate[max(trial.intermediate)] if trial.intermediate else None


def rows(sweep: Sweep, state: SweepState, now: float | None = None) -> list[tuple[str, ...]]:
    """One row per trial, in number order; "best so far" is the best result among this trial and those before."""
    sign = 1.0 if sweep.objective.goal == "min" else -1.0
    best: float | None = None
    table: list[tuple[str, ...]] = []
    for trial in state.trials:
        if trial.state == "complete" and trial.value is not None and (best is None or sign * trial.value < sign * best):
            best = trial.value
        step = f"{trial.step}/{trial.total_steps}" if trial.step is not None and trial.total_steps else (
            str(trial.step) if trial.step is not None else "-")
        table.append((str(trial.number), _params(trial.params), trial.state, step, _number(objective(trial)),
                      _number(best), _duration(trial_eta(trial, now))))
    return table


def format_table(sweep: Sweep, state: SweepState, now: float | None = None) -> list[str]:
    """The table as aligned lines, with a header."""
    body = [HEADERS, *rows(sweep, state, now)]
    widths = [max(len(row[i]) for row in body) for i in range(len(HEADERS))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in body]


def results(name: str, sweep: Sweep, state: SweepState, best: Trial | None) -> dict[str, Any]:
    """The sweep's results as data: its objective, the best trial and every trial."""
    return {"sweep": name, "objective": {"metric": sweep.objective.metric, "goal": sweep.objective.goal},
            "best": _trial_data(best) if best else None, "trials": [_trial_data(t) for t in state.trials]}


def _trial_data(trial: Trial) -> dict[str, Any]:
    return {"trial": trial.number, "params": trial.params, "state": trial.state, "step": trial.step,
            "objective": objective(trial), "seconds": (trial.finished - trial.started)
            if trial.finished is not None and trial.started is not None else None}
