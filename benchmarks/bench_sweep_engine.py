"""Benchmark: what one sweep decision costs as the sweep grows, and what a refresh of the results table costs.

Every decision of the search engine (kubetrain.sweeps.engine) rebuilds an Optuna study from the sweep's JSON
state, so its cost grows with the number of trials. This measures, for a state of N finished trials (N = 10,
100, 1,000 by default, each with 10 intermediate values), interleaved over `--rounds` rounds:

* suggest: the next trial's parameters (tpe and random over 3 parameters, one a log-uniform float);
* prune: a median-rule decision for a running trial with 5 intermediate values;
* table: the results table's lines (`format_table`), what `kubetrain sweep run` redraws once a second;
* state: the state's JSON round trip (what a controller would read and write in a status).

The medians are printed per N (milliseconds). Pure CPU: no process is started.

    .venv/bin/python benchmarks/bench_sweep_engine.py [--trials 10,100,1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from kubetrain.jobspec.load import parse_spec
from kubetrain.jobspec.sweep import Sweep
from kubetrain.sweeps.engine import Engine
from kubetrain.sweeps.state import SweepState
from kubetrain.sweeps.table import format_table

SPEC = """\
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: bench}
spec: {image: "ghcr.io/acme/b:1", command: [python, t.py]}
sweep:
"""


def sweep(algorithm: str, trials: int) -> Sweep:
    section = {"parameters": [{"name": "lr", "logUniform": [1e-5, 1.0]}, {"name": "width", "int": [8, 512]},
                              {"name": "opt", "choice": ["adam", "sgd", "lion"]}],
               "objective": {"metric": "acc", "goal": "max"}, "search": {"algorithm": algorithm},
               "trials": trials + 1, "earlyStopping": {"rule": "median"}}
    loaded = parse_spec(SPEC + "  " + json.dumps(section))
    assert loaded.sweep is not None
    return loaded.sweep


def finished_state(engine: Engine, count: int) -> SweepState:
    """`count` trials done (their parameters drawn at random: TPE's own would take the benchmark's time to make)."""
    random = Engine(sweep("random", count))
    state = SweepState(started=0.0)
    for number in range(count):
        trial = random.suggest(state, 0.0)
        assert trial is not None
        for step in range(1, 11):
            random.report(state, number, step * 10, (number % 17) / 17 + step / 100)
        random.finish(state, number, "complete", 1.0)
    return state


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def measure(count: int) -> dict[str, float]:
    tpe, random = Engine(sweep("tpe", count)), Engine(sweep("random", count))
    base = finished_state(tpe, count)
    text = base.to_json()

    def prune() -> bool:
        state = SweepState.from_json(text)
        trial = random.suggest(state, 0.0)
        assert trial is not None
        for step in range(1, 6):
            random.report(state, trial.number, step * 10, 0.01)
        return random.should_prune(state, trial.number)

    return {"suggest tpe": timed(lambda: tpe.suggest(SweepState.from_json(text), 0.0)),
            "suggest random": timed(lambda: random.suggest(SweepState.from_json(text), 0.0)),
            "prune (median)": timed(prune),
            "table": timed(lambda: format_table(tpe.sweep, base, 2.0)),
            "state JSON round trip": timed(lambda: SweepState.from_json(base.to_json()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", default="10,100,1000", help="comma-separated sizes of the finished state")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(size) for size in args.trials.split(",")]
    samples: dict[int, dict[str, list[float]]] = {size: {} for size in sizes}
    for _ in range(args.rounds):
        for size in sizes:  # interleaved: each round measures every size once
            for name, ms in measure(size).items():
                samples[size].setdefault(name, []).append(ms)
    names = list(samples[sizes[0]])
    print("trials  " + "  ".join(f"{name:>22}" for name in names) + "   (median ms)")
    for size in sizes:
        cells = "  ".join(f"{statistics.median(samples[size][name]):>22.1f}" for name in names)
        print(f"{size:>6}  {cells}")


if __name__ == "__main__":
    main()
