"""Hang and straggler detection (kubetrain.observe.hang) on the records kubetrain.runtime.heartbeat writes."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubetrain.observe.hang import STALE_AFTER_SECONDS, RankView, Thresholds, assess, limit_for, stragglers
from kubetrain.runtime import heartbeat as heartbeat_module
from kubetrain.runtime.heartbeat import WRITE_SECONDS, Heartbeat

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
    monkeypatch.setattr(heartbeat_module, "time", fake)
    return fake


def view(p: Heartbeat, written_at: float | None = None) -> RankView:
    record: dict[str, Any] = p.record()
    if written_at is not None:
        record["written_at"] = written_at
    return RankView.parse(record)


def train(ranks: list[Heartbeat], clock: Clock, steps: int, seconds: float, own: dict[int, float] | None = None
          ) -> None:
    """`steps` steps of `seconds` each; `own`: a rank's own seconds per step (outside the collective: it
    waits in the collective for the rest of the step), else all of it."""
    for _ in range(steps):
        for p in ranks:
            p.phase("data")
        clock.now += seconds
        for p in ranks:
            p.phase("train")
            p.collective(seconds - (own or {}).get(p.rank, seconds))
            p.step(p.step_no + 1)


def test_no_progress_past_the_floor_is_a_hang_and_progress_clears_it(clock: Clock) -> None:
    ranks = [Heartbeat(r, 2, None) for r in range(2)]
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
    ranks = [Heartbeat(0, 1, None)]
    train(ranks, clock, 20, 2.0)  # 10 x p99 = 20 s > the 5 s floor
    assert limit_for([view(ranks[0])], T) == (pytest.approx(20.0), "train")
    clock.now += 19
    assert not assess([view(ranks[0])], 1, T, clock.now).hung
    clock.now += 2
    assert assess([view(ranks[0])], 1, T, clock.now).hung


def test_checkpoint_and_eval_get_the_phase_threshold_then_k_times_their_longest_run(clock: Clock) -> None:
    rank = Heartbeat(0, 1, None)
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
    rank = Heartbeat(0, 1, None)
    rank.phase("data")
    clock.now += 40  # a slow first batch / compilation: below phaseTimeoutSeconds
    assert not assess([view(rank)], 1, T, clock.now).hung
    rank.step(1)
    rank.phase("data")
    clock.now += 30  # the second step: still no step time known
    assert limit_for([view(rank)], T)[1] == "start"
    assert not assess([view(rank)], 1, T, clock.now).hung


def test_a_stopped_rank_is_stale_and_its_old_phase_does_not_pick_the_threshold(clock: Clock) -> None:
    ranks = [Heartbeat(r, 2, None) for r in range(2)]
    stopped = view(ranks[1])  # written at start-up, then SIGSTOPped: still says "start"
    train(ranks[:1], clock, 20, 0.5)
    clock.now += 5.5
    verdict = assess([view(ranks[0], clock.now - 1), stopped], 2, T, clock.now)
    assert verdict.hung and verdict.phase == "train"
    assert [r.rank for r in verdict.stale] == [1] and [r.rank for r in verdict.behind] == [1]
    assert clock.now - stopped.written_at > STALE_AFTER_SECONDS


def test_missing_ranks_get_the_start_up_threshold_from_the_job_start(clock: Clock) -> None:
    started = clock.now
    present = Heartbeat(0, 2, None)
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
    rank = Heartbeat(0, 1, None)
    train([rank], clock, 3, 0.1)
    rank.phase("done")
    clock.now += 10_000
    assert not assess([view(rank)], 1, T, clock.now).hung


def test_a_rank_with_slow_data_is_a_straggler_named_with_its_node(clock: Clock) -> None:
    ranks = [Heartbeat(r, 4, None) for r in range(4)]
    train(ranks, clock, 30, 0.1, own={0: 0.010, 1: 0.010, 2: 0.080, 3: 0.010})
    found = stragglers([view(p) for p in ranks], 2.0)
    assert [s.rank.rank for s in found] == [2]
    assert found[0].describe().startswith("rank 2 (node 1, ") and "80.0 ms of its own per step" in found[0].describe()


def test_even_ranks_and_few_samples_are_no_stragglers(clock: Clock) -> None:
    ranks = [Heartbeat(r, 2, None) for r in range(2)]
    train(ranks, clock, 30, 0.1, own={0: 0.010, 1: 0.014})  # within the factor
    assert stragglers([view(p) for p in ranks], T.straggler_factor) == ()
    few = [Heartbeat(r, 2, None) for r in range(2)]
    train(few, clock, 5, 1.0, own={0: 0.01, 1: 1.0})
    assert stragglers([view(p) for p in few], T.straggler_factor) == ()


def throttled(clock: Clock, steps: int) -> list[Heartbeat]:
    """Three ranks, rank 1 stopped 100 ms of every 200 ms (a SIGSTOP/SIGCONT loop): it runs its 18 ms of
    its own per step at the others' pace, except that every sixth step takes the 100 ms it was stopped;
    the others wait for it in the collective."""
    ranks = [Heartbeat(r, 3, None) for r in range(3)]
    for n in range(steps):
        stopped = 0.100 if n % 6 == 5 else 0.0
        train(ranks, clock, 1, 0.020 + stopped, own={0: 0.018, 1: 0.018 + stopped, 2: 0.018})
    return ranks


def test_a_throttled_rank_is_named_by_the_time_it_loses_anywhere(clock: Clock) -> None:
    """Its median step is a normal one (only one step in six is hit): the mean of its own time is 1.9x."""
    ranks = throttled(clock, 60)
    found = assess([view(p) for p in ranks], 3, Thresholds(), clock.now).stragglers
    assert [s.rank.rank for s in found] == [1], found
    assert found[0].own == pytest.approx(0.018 + 0.100 / 6, rel=0.05)


def test_a_recovered_stall_does_not_make_a_rank_a_straggler(clock: Clock) -> None:
    """Rank 1 SIGSTOPped for 74 s (a hang, judged as one) then resumed: its step is a stall, left out."""
    ranks = [Heartbeat(r, 2, None) for r in range(2)]
    train(ranks, clock, 50, 0.05)
    train(ranks, clock, 1, 74.0, own={0: 0.01, 1: 74.0})
    train(ranks, clock, 30, 0.05)
    assert assess([view(p) for p in ranks], 2, Thresholds(timeout=20), clock.now).stragglers == ()


def test_eval_and_checkpoint_time_is_left_out_of_the_step_and_own_times(clock: Clock) -> None:
    rank = Heartbeat(0, 1, None)
    train([rank], clock, 2, 0.1)
    rank.phase("checkpoint")
    clock.now += 30
    rank.phase("data")
    clock.now += 0.1
    rank.collective(0.04)
    rank.step(3)
    record = rank.record()
    assert record["step_times"][-1] == pytest.approx(0.1) and record["own_times"][-1] == pytest.approx(0.06)
    assert record["phase_runs"]["checkpoint"] == [30.0] and record["phase_max"]["checkpoint"] == 30.0


def test_a_recovered_stall_leaves_the_training_threshold_where_it_was(clock: Clock) -> None:
    """The drill: steps of 0.5 s, threshold 20 s; one 74 s stall. Before, the threshold became 10 x a p99
    that held the stall (741 s): a second hang was found 12 minutes late."""
    limits = Thresholds(timeout=20)
    ranks = [Heartbeat(r, 2, None) for r in range(2)]
    train(ranks, clock, 60, 0.5)
    before = limit_for([view(p) for p in ranks], limits)
    train(ranks, clock, 1, 74.1)  # stopped, then SIGCONT
    train(ranks, clock, 10, 0.5)
    assert before == limit_for([view(p) for p in ranks], limits) == (20.0, "train")
    last = clock.now
    clock.now += 20.5  # a second hang
    verdict = assess([view(p, clock.now - 1) for p in ranks], 2, limits, clock.now)
    assert verdict.hung and verdict.since == pytest.approx(last) and verdict.limit == 20.0


def test_a_lasting_slowdown_is_not_a_stall(clock: Clock) -> None:
    """Steps that become 2x slower for good (within stepFactor of the median) raise the threshold."""
    ranks = [Heartbeat(0, 1, None)]
    train(ranks, clock, 100, 1.0)
    train(ranks, clock, 100, 2.0)
    assert limit_for([view(ranks[0])], T) == (pytest.approx(20.0), "train")


def test_a_rank_stopped_during_an_eval_is_judged_by_the_earlier_evals(clock: Clock) -> None:
    """Evals of 30 s: the next one may take 10 x 30 s, not the 1,800 s default for a phase never seen."""
    limits = Thresholds()
    rank = Heartbeat(0, 1, None)
    train([rank], clock, 10, 0.1)
    rank.phase("eval")
    assert limit_for([view(rank)], limits) == (1800.0, "eval")
    clock.now += 30
    rank.phase("train")
    train([rank], clock, 10, 0.1)
    rank.phase("eval")
    assert limit_for([view(rank)], limits) == (pytest.approx(300.0), "eval")


def test_a_stalled_checkpoint_does_not_raise_the_next_ones_threshold(clock: Clock) -> None:
    rank = Heartbeat(0, 1, None)
    for seconds in (3.0, 3.5, 600.0, 3.2):  # the third stalled (a hang), then recovered
        train([rank], clock, 5, 0.1)
        rank.phase("checkpoint")
        clock.now += seconds
        rank.phase("train")
    rank.phase("checkpoint")
    assert limit_for([view(rank)], T) == (pytest.approx(35.0), "checkpoint")


def test_records_of_an_older_runtime_are_judged_by_their_summaries(clock: Clock) -> None:
    """A record without the histories (an image with an older kubetrain): its p99, longest phase, median."""
    rank = Heartbeat(0, 1, None)
    train([rank], clock, 20, 2.0)
    rank.phase("checkpoint")
    clock.now += 10
    rank.phase("train")
    record = {k: v for k, v in rank.record().items() if k not in ("step_times", "own_times", "phase_runs")}
    old = RankView.parse(record)
    assert limit_for([old], T) == (pytest.approx(20.0), "train")
    assert limit_for([replace(old, phase="checkpoint")], T) == (pytest.approx(100.0), "checkpoint")


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
    saved = heartbeat_module.time
    heartbeat_module.time = clock  # type: ignore[assignment]
    try:
        rank = Heartbeat(0, 1, None)
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
        heartbeat_module.time = saved  # type: ignore[assignment]


@settings(max_examples=150, deadline=None)
@given(step=st.floats(0.005, 19.0), jitter=st.lists(st.floats(1.0, 3.0), min_size=1, max_size=8),
       steps=st.integers(10, 120), stalls=st.dictionaries(st.integers(0, 119), st.floats(1.01, 30.0), max_size=4),
       world=st.integers(1, 3))
def test_recovered_stalls_raise_no_false_positive_and_a_second_hang_is_found_on_time(
        step: float, jitter: list[float], steps: int, stalls: dict[int, float], world: int) -> None:
    """A normal run (steps varying at most 3x) with stalls (a step longer than the threshold: judged hung,
    then recovered) is not hung at the worst instant of any normal step, its threshold is the one of the
    same run without the stalls, and a hang after it is found within that threshold + 30 s."""
    clock = Clock()
    saved = heartbeat_module.time
    heartbeat_module.time = clock  # type: ignore[assignment]
    try:
        durations = [step * f for f, _ in zip(itertools.cycle(jitter), range(steps), strict=False)]
        twin = Heartbeat(0, 1, None)
        twin.step(1)
        for seconds in durations:
            train([twin], clock, 1, seconds)
        normal = limit_for([view(twin)], T)[0]
        ranks = [Heartbeat(r, world, None) for r in range(world)]
        train(ranks, clock, 1, 3.0)  # start-up
        for index, seconds in enumerate(durations):
            if index in stalls:
                train(ranks, clock, 1, normal * stalls[index])
            worst = clock.now + seconds - 1e-6
            records = [replace(view(p), written_at=max(view(p).written_at, worst - WRITE_SECONDS)) for p in ranks]
            verdict = assess(records, world, T, worst)
            assert not verdict.hung, (index, seconds, verdict)
            train(ranks, clock, 1, seconds)
        assert limit_for([view(p) for p in ranks], T)[0] == pytest.approx(normal)
        last = clock.now
        clock.now = last + normal + 30
        verdict = assess([view(p, clock.now - 1) for p in ranks], world, T, clock.now)
        assert verdict.hung and verdict.since == pytest.approx(last), verdict
    finally:
        heartbeat_module.time = saved  # type: ignore[assignment]
