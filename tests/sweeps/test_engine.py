"""The sweep engine: decisions from the JSON state alone (no duplicate trial, a grid covers every point, pruning and
suggestions the same for the same state), and Optuna's pruners stopping the trials they should."""

from __future__ import annotations

import itertools
import json
import textwrap

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubetrain.jobspec.load import parse_spec
from kubetrain.jobspec.sweep import Sweep
from kubetrain.sweeps.engine import Engine, params_key
from kubetrain.sweeps.state import SweepState

BASE = textwrap.dedent("""\
    apiVersion: kubetrain.dev/v1alpha1
    kind: TrainingJob
    metadata: {name: s}
    spec: {image: "ghcr.io/acme/s:1", command: [python, t.py]}
    """)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def sweep(**section: object) -> Sweep:
    data = {"objective": {"metric": "acc", "goal": "max"}, **section}
    loaded = parse_spec(BASE + "sweep: " + json.dumps(data))
    assert loaded.sweep is not None
    return loaded.sweep


def run_out(engine: Engine, state: SweepState) -> SweepState:
    """Suggest until the engine says no more, each trial completing at once with a made-up value."""
    while (trial := engine.suggest(state)) is not None:
        engine.report(state, trial.number, 1, float(len(json.dumps(trial.params)) % 7))
        engine.finish(state, trial.number, "complete")
    return state


discrete = st.lists(st.one_of(
    st.builds(lambda n: ("choice", list(range(n))), st.integers(1, 4)),
    st.builds(lambda lo, n: ("int", [lo, lo + n]), st.integers(-3, 3), st.integers(1, 3)),
), min_size=1, max_size=3)


@SETTINGS
@given(space=discrete, algorithm=st.sampled_from(["grid", "random", "tpe"]), seed=st.integers(0, 2**16),
       extra=st.integers(0, 3))
def test_no_trial_repeats_another_and_a_grid_covers_every_point(space: list[tuple[str, list[int]]], algorithm: str,
                                                                 seed: int, extra: int) -> None:
    params = [{"name": f"p{i}", kind: values} for i, (kind, values) in enumerate(space)]
    size = sweep(parameters=params, search={"algorithm": "grid"}).grid_size
    assert size is not None
    trials = size if algorithm == "grid" else max(1, size - extra)
    engine = Engine(sweep(parameters=params, search={"algorithm": algorithm, "seed": seed}, trials=trials))
    state = run_out(engine, SweepState())
    keys = [params_key(t.params) for t in state.trials]
    assert len(keys) == len(set(keys)) == trials
    if algorithm == "grid":
        names = [f"p{i}" for i in range(len(space))]
        points = itertools.product(*(range(v[0], v[1] + 1) if kind == "int" else v for kind, v in space))
        assert sorted(keys) == sorted(params_key(dict(zip(names, point, strict=True))) for point in points)


@SETTINGS
@given(seed=st.integers(0, 2**16), algorithm=st.sampled_from(["random", "tpe"]), done=st.integers(0, 8))
def test_the_same_state_gives_the_same_suggestion(seed: int, algorithm: str, done: int) -> None:
    engine = Engine(sweep(parameters=[{"name": "lr", "logUniform": [1e-5, 1.0]}, {"name": "w", "int": [1, 64]},
                                      {"name": "opt", "choice": ["adam", "sgd"]}],
                          search={"algorithm": algorithm, "seed": seed, "startupTrials": 3}, trials=done + 1))
    state = SweepState()
    for _ in range(done):
        trial = engine.suggest(state)
        assert trial is not None
        engine.report(state, trial.number, 1, trial.params["lr"])
        engine.finish(state, trial.number, "complete")
    first, second = SweepState.from_json(state.to_json()), SweepState.from_json(state.to_json())
    one, two = engine.suggest(first), engine.suggest(second)
    assert one is not None and two is not None and one.params == two.params
    assert engine.suggest(first) is None  # the trial count is reached


curves = st.lists(st.lists(st.floats(0, 1), min_size=1, max_size=6), min_size=1, max_size=6)


@SETTINGS
@given(finished=curves, running=st.lists(st.floats(0, 1), min_size=1, max_size=6),
       rule=st.sampled_from(["median", "halving"]))
def test_pruning_decisions_come_from_the_state_alone(finished: list[list[float]], running: list[float],
                                                     rule: str) -> None:
    engine = Engine(sweep(parameters=[{"name": "x", "uniform": [0, 1]}], trials=len(finished) + 1,
                          search={"algorithm": "random"}, earlyStopping={"rule": rule, "minTrials": 1}))
    state = SweepState()
    for curve in finished:
        trial = engine.suggest(state)
        assert trial is not None
        for step, value in enumerate(curve, start=1):
            engine.report(state, trial.number, step, value)
        engine.finish(state, trial.number, "complete")
    trial = engine.suggest(state)
    assert trial is not None
    decisions = []
    for step, value in enumerate(running, start=1):
        engine.report(state, trial.number, step, value)
        again = SweepState.from_json(state.to_json())
        decision = engine.should_prune(state, trial.number)
        assert engine.should_prune(again, trial.number) == decision
        assert again.to_json() == state.to_json()  # the pruner's bookkeeping too
        decisions.append(decision)
        if decision:
            break


def test_median_stops_a_trial_below_the_finished_trials_median_and_keeps_a_good_one() -> None:
    engine = Engine(sweep(parameters=[{"name": "x", "choice": [1, 2, 3, 4]}], search={"algorithm": "grid"},
                          earlyStopping={"rule": "median", "warmupSteps": 2, "minTrials": 2}))
    state = SweepState()
    for curve in ([0.5, 0.7, 0.8], [0.6, 0.8, 0.9]):
        trial = engine.suggest(state)
        assert trial is not None
        for step, value in enumerate(curve, start=1):
            engine.report(state, trial.number, step, value)
        engine.finish(state, trial.number, "complete")
    bad, good = engine.suggest(state), engine.suggest(state)
    assert bad is not None and good is not None
    engine.report(state, bad.number, 1, 0.1)
    assert not engine.should_prune(state, bad.number)  # warm-up: step 1 < warmupSteps
    engine.report(state, bad.number, 2, 0.1)
    assert engine.should_prune(state, bad.number)
    engine.finish(state, bad.number, "pruned")
    for step, value in enumerate([0.7, 0.85, 0.95], start=1):
        engine.report(state, good.number, step, value)
        assert not engine.should_prune(state, good.number)
    engine.finish(state, good.number, "complete")
    best = engine.best(state)
    assert best is not None and best.number == good.number and best.value == 0.95
    assert [t.state for t in state.trials] == ["complete", "complete", "pruned", "complete"]


def test_halving_keeps_the_best_third_at_a_rung() -> None:
    engine = Engine(sweep(parameters=[{"name": "x", "int": [1, 9]}], search={"algorithm": "grid"},
                          earlyStopping={"rule": "halving", "warmupSteps": 1, "reductionFactor": 3}))
    state = SweepState()
    for value in (0.9, 0.8, 0.7, 0.6, 0.5):
        trial = engine.suggest(state)
        assert trial is not None
        engine.report(state, trial.number, 1, value)
        assert not engine.should_prune(state, trial.number) or value < 0.9
        engine.finish(state, trial.number, "complete")
    worst = engine.suggest(state)
    assert worst is not None
    engine.report(state, worst.number, 1, 0.1)
    assert engine.should_prune(state, worst.number)


def test_budget_ends_the_sweep() -> None:
    failing = Engine(sweep(parameters=[{"name": "x", "uniform": [0, 1]}], trials=10,
                           budget={"maxFailedTrials": 2}))
    state = SweepState()
    for _ in range(2):
        trial = failing.suggest(state)
        assert trial is not None
        failing.finish(state, trial.number, "complete")  # no objective reported: failed
    assert [t.state for t in state.trials] == ["failed", "failed"] and failing.suggest(state) is None
    timed = Engine(sweep(parameters=[{"name": "x", "uniform": [0, 1]}], trials=10, budget={"maxSeconds": 60}))
    state = SweepState(started=1000.0)
    assert timed.suggest(state, now=1059.0) is not None and timed.suggest(state, now=1060.0) is None
