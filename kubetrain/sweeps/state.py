"""A sweep's whole search state as plain data that round-trips through JSON, so it can live in a file (a local
sweep) or in a resource's status (a sweep in the cluster), and every decision is made from it alone."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from kubetrain.errors import KubetrainError

TrialState = Literal["running", "complete", "pruned", "failed", "stopped"]
TRIAL_STATES = ("running", "complete", "pruned", "failed", "stopped")
FINISHED = ("complete", "pruned", "failed", "stopped")
STATE_VERSION = 1


class SweepStateError(KubetrainError):
    """A sweep's saved state cannot be read (not JSON, or not a state this version writes)."""

    exit_code = 2


@dataclass
class Trial:
    """One trial: its parameters, its intermediate values by step, its result and its state. `attrs` are the
    pruner's own bookkeeping (successive halving's rungs), kept so the next decision sees it."""

    number: int
    params: dict[str, Any]
    state: TrialState = "running"
    intermediate: dict[int, float] = field(default_factory=dict)
    value: float | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    started: float | None = None
    finished: float | None = None
    step: int | None = None
    total_steps: int | None = None

    @property
    def name_suffix(self) -> str:
        """`t3`: what a trial adds to the sweep's name (trial names derive from the number, never random)."""
        return f"t{self.number}"

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "params": self.params, "state": self.state,
                "intermediate": [[step, value] for step, value in sorted(self.intermediate.items())],
                "value": _float(self.value), "attrs": self.attrs, "started": _float(self.started),
                "finished": _float(self.finished),
                "step": self.step, "totalSteps": self.total_steps}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trial:
        state = data.get("state", "running")
        if state not in TRIAL_STATES:
            raise SweepStateError(f"trial {data.get('number')}: unknown state {state!r}")
        return cls(int(data["number"]), dict(data.get("params") or {}), state,
                   {int(step): float(value) for step, value in data.get("intermediate") or []},
                   _float(data.get("value")), dict(data.get("attrs") or {}), _float(data.get("started")),
                   _float(data.get("finished")), data.get("step"), data.get("totalSteps"))


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass
class SweepState:
    """Every trial so far, in number order, and when the sweep started."""

    trials: list[Trial] = field(default_factory=list)
    started: float | None = None

    def trial(self, number: int) -> Trial:
        return self.trials[number]

    def running(self) -> list[Trial]:
        return [t for t in self.trials if t.state == "running"]

    def count(self, *states: str) -> int:
        return sum(1 for t in self.trials if t.state in states)

    def to_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "started": _float(self.started), "trials": [t.to_dict() for t in self.trials]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Any) -> SweepState:
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise SweepStateError(f"not a sweep state of version {STATE_VERSION}")
        try:
            trials = [Trial.from_dict(t) for t in data.get("trials") or []]
        except (KeyError, TypeError, ValueError) as exc:
            raise SweepStateError(f"a trial is malformed: {exc}") from None
        if [t.number for t in trials] != list(range(len(trials))):
            raise SweepStateError("trial numbers must be 0, 1, 2, ... in order")
        return cls(trials, _float(data.get("started")))

    @classmethod
    def from_json(cls, text: str) -> SweepState:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SweepStateError(f"invalid JSON: {exc}") from None
        return cls.from_dict(data)
