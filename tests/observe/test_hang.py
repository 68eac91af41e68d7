"""Hang and straggler detection (kubetrain.observe.hang) on the records kubetrain.runtime.progress writes."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubetrain.observe.hang import STALE_AFTER_SECONDS, RankView, Thresholds, assess, limit_for, stragglers
from kubetrain.runtime import progress as progress_module
from kubetrain.runtime.progress import WRITE_SECONDS, Progress

T = Thresholds(timeout=5.0, step_factor=10.0, phase_timeout=60.0, straggler_factor=2.0)


@dataclass
class Clock:
    now: float = 1_000_000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(progress_module, "time", fake)
    return fake


def view(p: Progress, written_at: float | None = None) -> RankView:
    record: dict[str, Any] = p.record()
    if written_at is not None:
        record["written_at"] = written_at
    return RankView.parse(record)


def train(ranks: list[Progress], clock: Clock, steps: int, seconds: float) -> None:
    for _ in range(steps):
        for p in ranks:
            p.phase("data")
        clock.now += seconds
        for p in ranks:
            p.phase("train")
            p.step(p.step_no + 1)


def test_no_progress_past_the_floor_is_a_hang_and_progress_clears_it(clock: Clock) -> None:
    ranks = [Progress(r, 2, None) for r in range(2)]
    train(ranks, clock, 20, 0.05)
    last = clock.now
    clock.now += 4.9
    assert not assess([view(p) for p in ranks], 2, T, clock.now).hung
    clock.now += 0.2
    verdict = assess([view(p) for p in ranks], 2, T, clock.now)
    assert verdict.hung and verdict.since == pytest.approx(last) and verdict.step == 20 and verdict.limit == 5.0
    train(ranks, clock, 1, 0.05)
    assert not assess([view(p) for p in ranks], 2, T, clock.now).hung


def test_the_threshold_adapts_to_slow_steps(clock: Clock) -> None:
    ranks = [Progress(0, 1, None)]
    train(ranks, clock, 20, 2.0)  # 10 x p99 = 20 s > the 5 s floor
    assert limit_for([view(ranks[0])], T) == (pytest.approx(20.0), "train")
    clock.now += 19
    assert not assess([view(ranks[0])], 1, T, clock.now).hung
    clock.now += 2
    assert assess([view(ranks[0])], 1, T, clock.now).hung


def test_checkpoint_and_eval_get_the_phase_threshold_then_k_times_their_longest_run(clock: Clock) -> None:
    rank = Progress(0, 1, None)
    train([rank], clock, 10, 0.1)
    rank.phase("checkpoint")
    clock.now += 50  # a first checkpoint: 10 x 0.1 s steps would say hung, the phase floor (60 s) does not
    assert not assess([view(rank)], 1, T, clock.now).hung
    rank.phase("train")
    train([rank], clock, 5, 0.1)
    rank.phase("checkpoint")
    assert limit_for([view(rank)], T) == (pytest.approx(500.0), "checkpoint")  # 10 x the 50 s one
    clock.now += 400
    assert not assess([view(rank)], 1, T, clock.now).hung
    clock.now += 101
    assert assess([view(rank)], 1, T, clock.now).hung


def test_the_first_step_counts_as_start_up(clock: Clock) -> None:
    rank = Progress(0, 1, None)
    rank.phase("data")
    clock.now += 40  # a slow first batch / compilation: below phaseTimeoutSeconds
    assert not assess([view(rank)], 1, T, clock.now).hung
    rank.step(1)
    rank.phase("data")
    clock.now += 30  # the second step: still no step time known
    assert limit_for([view(rank)], T)[1] == "start"
    assert not assess([view(rank)], 1, T, clock.now).hung


def test_a_stopped_rank_is_stale_and_its_old_phase_does_not_pick_the_threshold(clock: Clock) -> None:
    ranks = [Progress(r, 2, None) for r in range(2)]
    stopped = view(ranks[1])  # written at start-up, then SIGSTOPped: still says "start"
    train(ranks[:1], clock, 20, 0.5)
    clock.now += 5.5
    verdict = assess([view(ranks[0], clock.now - 1), stopped], 2, T, clock.now)
    assert verdict.hung and verdict.phase == "train"
    assert [r.rank for r in verdict.stale] == [1] and [r.rank for r in verdict.behind] == [1]
    assert clock.now - stopped.written_at > STALE_AFTER_SECONDS


def test_missing_ranks_get_the_start_up_threshold_from_the_job_start(clock: Clock) -> None:
    started = clock.now
    present = Progress(0, 2, None)
    clock.now += 59
    assert not assess([view(present, clock.now)], 2, T, clock.now, started).hung
    clock.now += 2
    verdict = assess([view(present, clock.now)], 2, T, clock.now, started)
    assert verdict.hung and verdict.missing == (1,)


def test_a_job_without_any_record_is_never_judged(clock: Clock) -> None:
    """A script job (no kubetrain.runtime): no records, however long it runs."""
    started = clock.now
    clock.now += 100_000
    assert not assess([], 2, T, clock.now, started).hung


def test_a_finished_job_is_never_hung(clock: Clock) -> None:
    rank = Progress(0, 1, None)
    train([rank], clock, 3, 0.1)
    rank.phase("done")
    clock.now += 10_000
    assert not assess([view(rank)], 1, T, clock.now).hung


def test_a_rank_with_slow_data_is_a_straggler_named_with_its_node(clock: Clock) -> None:
    ranks = [Progress(r, 4, None) for r in range(4)]
    for _ in range(30):
        for p in ranks:
            p.own_time(0.080 if p.rank == 2 else 0.010)
    found = stragglers([view(p) for p in ranks], 2.0)
    assert [s.rank.rank for s in found] == [2]
    assert found[0].describe().startswith("rank 2 (node 1, ") and "80.0 ms" in found[0].describe()


def test_even_ranks_and_few_samples_are_no_stragglers(clock: Clock) -> None:
    ranks = [Progress(r, 2, None) for r in range(2)]
    for own in (0.010, 0.015):  # within the factor
        for _ in range(30):
            ranks[int(own > 0.01)].own_time(own)
    assert stragglers([view(p) for p in ranks], 2.0) == ()
    few = [Progress(r, 2, None) for r in range(2)]
    for p in few:
        for _ in range(5):
            p.own_time(1.0 if p.rank else 0.01)
    assert stragglers([view(p) for p in few], 2.0) == ()


@dataclass(frozen=True)
class Segment:
    phase: str
    seconds: float
    steps: bool  # a training step ends this segment


def timeline(step: float, jitter: list[float], epochs: int, steps_per_epoch: int, eval_s: list[float],
             ckpt_s: list[float], ckpt_every: int) -> list[Segment]:
    """A normal run: start, steps (data then forward/backward), a checkpoint every ckpt_every steps, an
    eval and a checkpoint at each epoch end."""
    segments = [Segment("start", 3.0, False)]
    factors = itertools.cycle(jitter)
    evals, ckpts = itertools.cycle(eval_s), itertools.cycle(ckpt_s)
    done = 0
    for _ in range(epochs):
        for _ in range(steps_per_epoch):
            seconds = step * next(factors)
            segments += [Segment("data", seconds / 4, False), Segment("train", seconds * 3 / 4, True)]
            done += 1
            if done % ckpt_every == 0:
                segments.append(Segment("checkpoint", next(ckpts), False))
        segments += [Segment("eval", next(evals), False), Segment("checkpoint", next(ckpts), False)]
    return segments


@settings(max_examples=150, deadline=None)
@given(step=st.floats(0.005, 19.0), jitter=st.lists(st.floats(1.0, 3.0), min_size=1, max_size=8),
       epochs=st.integers(1, 3), steps_per_epoch=st.integers(1, 40), ckpt_every=st.integers(1, 50),
       first_eval=st.floats(0.0, 55.0), first_ckpt=st.floats(0.0, 55.0),
       growth=st.lists(st.floats(0.1, 5.0), min_size=1, max_size=4))
def test_normal_runs_with_checkpoints_and_evals_are_never_hung(
        step: float, jitter: list[float], epochs: int, steps_per_epoch: int, ckpt_every: int, first_eval: float,
        first_ckpt: float, growth: list[float]) -> None:
    """At the worst instant of every segment (just before it ends, the record WRITE_SECONDS old), a run
    whose first eval/checkpoint fits phaseTimeoutSeconds and whose later ones are at most 5x the longest
    earlier one, and whose steps vary at most 3x (the first two within phaseTimeoutSeconds), is not hung."""
    clock = Clock()
    saved = progress_module.time
    progress_module.time = clock  # type: ignore[assignment]
    try:
        rank = Progress(0, 1, None)
        evals = [first_eval] + [first_eval * g for g in growth]
        ckpts = [first_ckpt] + [first_ckpt * g for g in growth]
        for segment in timeline(step, jitter, epochs, steps_per_epoch, evals, ckpts, ckpt_every):
            rank.phase(segment.phase)
            record = view(rank)
            end = clock.now + segment.seconds
            worst = end - 1e-6
            visible = replace(record, written_at=max(record.written_at, worst - WRITE_SECONDS))
            verdict = assess([visible], 1, T, worst)
            assert not verdict.hung, (segment, verdict)
            clock.now = end
            if segment.steps:
                rank.step(rank.step_no + 1)
    finally:
        progress_module.time = saved  # type: ignore[assignment]
