"""Hang and straggler detection from the ranks' progress records (kubetrain.runtime.heartbeat): pure functions.

A job is hung when no rank has made progress (finished a step, or changed phase) for longer than its
threshold:

* training: max(timeoutSeconds, stepFactor x the p99 of the ranks' recent step times, stalls left out);
* while a rank evaluates or checkpoints: the same rule over that phase's recent durations, or
  phaseTimeoutSeconds before its first run; while a rank starts up: phaseTimeoutSeconds.

A stall is a time above the threshold itself: it was judged a hang (or would have been), so it does not raise
the threshold for the next one (`stall_free_bound`). Everything is computed from the records alone, so the
controller's stateless rounds, `kubetrain stacks` and `kubetrain run` give the same verdict.

A rank whose record is not refreshed (the writer thread runs every WRITE_SECONDS) does not run at all: that
is the prime suspect (stopped, or stuck holding the GIL). A straggler's own time per step (the wall time
outside the collectives, which the collectives do not equalise) stays above stragglerFactor x the median of
the others.
"""

from __future__ import annotations

import bisect
import json
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LONG_PHASES = ("start", "eval", "checkpoint")
STALE_AFTER_SECONDS = 10.0  # a record older than this (5 writer periods) means the process does not run
MIN_STEPS_FOR_STRAGGLER = 20
MIN_STRAGGLER_GAP_SECONDS = 0.002


@dataclass(frozen=True)
class Thresholds:
    """spec.hang, as numbers."""

    timeout: float = 300.0
    step_factor: float = 10.0
    phase_timeout: float = 1800.0
    straggler_factor: float = 1.5

    @classmethod
    def from_json(cls, text: str | None) -> Thresholds:
        """From a pod's KUBETRAIN_HANG; the defaults when it is absent or unreadable (an older render)."""
        try:
            hang = json.loads(text or "{}")
            return cls(float(hang.get("timeoutSeconds", cls.timeout)), float(hang.get("stepFactor", cls.step_factor)),
                       float(hang.get("phaseTimeoutSeconds", cls.phase_timeout)),
                       float(hang.get("stragglerFactor", cls.straggler_factor)))
        except (ValueError, TypeError, AttributeError):
            return cls()

    @classmethod
    def from_spec(cls, hang: Any) -> Thresholds:
        return cls(float(hang.timeoutSeconds), float(hang.stepFactor), float(hang.phaseTimeoutSeconds),
                   float(hang.stragglerFactor))


def _floats(values: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in values or ())


@dataclass(frozen=True)
class RankView:
    """One rank's record, as read from its file. The histories (step_times, own_times: the same steps;
    phase_runs) come from this runtime; a record of an older one has only the summaries."""

    rank: int
    node: int
    host: str
    pid: int
    step: int
    phase: str
    phase_since: float
    step_at: float
    written_at: float
    step_p99: float | None = None
    own_p50: float | None = None
    steps_timed: int = 0
    own_timed: int = 0
    phase_max: Mapping[str, float] = field(default_factory=dict)
    step_times: tuple[float, ...] = ()
    own_times: tuple[float, ...] = ()
    phase_runs: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    @classmethod
    def parse(cls, record: Mapping[str, Any]) -> RankView:
        return cls(int(record["rank"]), int(record.get("node", 0)), str(record.get("host", "")),
                   int(record.get("pid", 0)), int(record["step"]), str(record["phase"]),
                   float(record["phase_since"]), float(record["step_at"]), float(record["written_at"]),
                   record.get("step_p99"), record.get("own_p50"), int(record.get("steps_timed", 0)),
                   int(record.get("own_timed", 0)), dict(record.get("phase_max") or {}),
                   _floats(record.get("step_times")), _floats(record.get("own_times")),
                   {str(k): _floats(v) for k, v in (record.get("phase_runs") or {}).items()})

    def runs_of(self, phase: str) -> tuple[float, ...]:
        """The recent durations of `phase` (an older runtime's record: its longest one)."""
        if self.phase_runs or not self.phase_max.get(phase):
            return self.phase_runs.get(phase, ())
        return (float(self.phase_max[phase]),)

    @property
    def progressed_at(self) -> float:
        return max(self.step_at, self.phase_since)

    def label(self) -> str:
        return f"rank {self.rank} (node {self.node}" + (f", {self.host})" if self.host else ")")


@dataclass(frozen=True)
class Straggler:
    rank: RankView
    own: float
    median: float

    def describe(self) -> str:
        return (f"{self.rank.label()} straggles: {self.own * 1000:.1f} ms of its own per step (outside the "
                f"collectives) vs a median of {self.median * 1000:.1f} ms on the other ranks")


@dataclass(frozen=True)
class Assessment:
    """The job at one instant: hung or not, since when, and who is behind."""

    hung: bool
    since: float | None  # the last progress of any rank (wall time)
    step: int
    limit: float
    phase: str  # the phase the limit was chosen for
    stale: tuple[RankView, ...] = ()  # ranks whose record is not refreshed: they do not run
    behind: tuple[RankView, ...] = ()  # ranks at a lower step than the others
    stragglers: tuple[Straggler, ...] = ()
    missing: tuple[int, ...] = ()  # ranks with no record at all


def _long_phase(rank: RankView) -> str | None:
    """The rank's phase if it may take many steps' time. Until its second step a rank counts as starting:
    its first step includes warm-up (compilation, the first batch, resume)."""
    if rank.phase in LONG_PHASES:
        return rank.phase
    return "start" if rank.steps_timed == 0 else None


def _p99(ordered: Sequence[float]) -> float:
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def stall_free_bound(times: Sequence[float], floor: float, factor: float) -> float:
    """max(floor, factor x the p99 of the times that are not stalls), where a stall is a time above this
    bound: it was (or would have been) judged a hang, so it must not raise the bound for the next one.
    Starting from factor x the median, which stalls cannot move while they are a minority, the bound grows
    while the times it admits raise it (a fixed point: every time kept lies below it, every time left out
    above it). Step times that vary less than `factor` around their median are all kept."""
    ordered = sorted(times)
    if not ordered:
        return floor
    bound = max(floor, factor * statistics.median(ordered))
    while True:
        kept = ordered[:bisect.bisect_right(ordered, bound)]
        grown = max(floor, factor * _p99(kept))
        if grown <= bound:
            return bound
        bound = grown


def training_limit(ranks: Sequence[RankView], thresholds: Thresholds) -> float:
    """The training threshold from the ranks' recent step times (an older runtime's record: its p99)."""
    times = [t for r in ranks for t in r.step_times]
    if times:
        return stall_free_bound(times, thresholds.timeout, thresholds.step_factor)
    p99 = max((r.step_p99 for r in ranks if r.step_p99 is not None), default=0.0)
    return max(thresholds.timeout, thresholds.step_factor * p99)


def phase_limit(ranks: Sequence[RankView], phase: str, thresholds: Thresholds) -> float:
    """The threshold of an eval or checkpoint from its earlier runs, like a step's (floor timeoutSeconds);
    phaseTimeoutSeconds for start-up and before a phase's first run."""
    runs = [t for r in ranks for t in r.runs_of(phase)]
    if phase == "start" or not runs:
        return thresholds.phase_timeout
    return stall_free_bound(runs, thresholds.timeout, thresholds.step_factor)


def limit_for(ranks: Sequence[RankView], thresholds: Thresholds) -> tuple[float, str]:
    """The hang threshold (seconds) that applies now, and the phase it was chosen for."""
    long_phases = sorted({phase for r in ranks if (phase := _long_phase(r))})
    if long_phases:
        return max(phase_limit(ranks, p, thresholds) for p in long_phases), long_phases[0]
    return training_limit(ranks, thresholds), "train"


def _own(rank: RankView, limit: float) -> tuple[float | None, int]:
    """The rank's mean own time per step over its recent steps, stalls (steps above `limit`) left out,
    and how many steps that covers; an older runtime's record: its median."""
    if not rank.own_times:
        return rank.own_p50, rank.own_timed
    kept = [own for step, own in zip(rank.step_times, rank.own_times, strict=False) if step <= limit]
    return (statistics.fmean(kept) if kept else None), len(kept)


def stragglers(ranks: Sequence[RankView], factor: float, limit: float = math.inf) -> tuple[Straggler, ...]:
    """Ranks whose own time per step (outside the collectives, on average: time lost anywhere counts)
    stays above factor x the median of the others. `limit`: the training threshold; steps longer than it
    are stalls, judged as hangs, and left out."""
    owns = {r.rank: _own(r, limit) for r in ranks}
    timed = [r for r in ranks if owns[r.rank][0] is not None and owns[r.rank][1] >= MIN_STEPS_FOR_STRAGGLER]
    found = []
    for rank in timed:
        others = [float(owns[r.rank][0]) for r in timed if r is not rank]  # type: ignore[arg-type]
        if not others:
            continue
        median, own = statistics.median(others), float(owns[rank.rank][0])  # type: ignore[arg-type]
        if own > factor * median and own - median > MIN_STRAGGLER_GAP_SECONDS:
            found.append(Straggler(rank, own, median))
    return tuple(found)


def assess(ranks: Sequence[RankView], world_size: int, thresholds: Thresholds, now: float | None = None,
           started: float | None = None) -> Assessment:
    """Judge the job from its ranks' records. `started`: when the job started, which counts as progress
    for ranks that have no record yet while others have one (still importing torch, or never started).
    Without any record there is no judgement: the job's ranks do not use kubetrain.runtime."""
    now = time.time() if now is None else now
    if not ranks:  # no rank uses kubetrain.runtime (a script job), or none has started yet: no judgement
        return Assessment(False, None, 0, 0.0, "start")
    live = [r for r in ranks if r.phase != "done"]
    present = {r.rank for r in ranks}
    missing = tuple(sorted(set(range(world_size)) - present))
    if not live and not missing:
        return Assessment(False, None, max((r.step for r in ranks), default=0), 0.0, "done")
    stale = tuple(r for r in live if now - r.written_at > STALE_AFTER_SECONDS)
    # The phase of a rank that does not run is old news (a rank stopped right after start still says
    # start): the running ranks tell which threshold applies.
    limit, phase = limit_for([r for r in live if r not in stale] or live, thresholds)
    if missing:
        limit, phase = max(limit, thresholds.phase_timeout), "start"
    times = [r.progressed_at for r in live] + ([started] if missing and started is not None else [])
    since = max(times) if times else started
    step = max((r.step for r in ranks), default=0)
    behind = tuple(r for r in live if r.step < step)
    hung = since is not None and now - since > limit
    found = stragglers(live, thresholds.straggler_factor, training_limit(live, thresholds))
    return Assessment(hung, since, step, limit, phase, stale, behind, found, missing)
