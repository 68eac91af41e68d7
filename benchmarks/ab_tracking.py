"""A/B: what logging to each tracker costs per training step on the digits model (target: < 1 %).

One process (world size 1, gloo, CPU) trains the digits example with the Trainer API; the sides alternate in
one run, in rotating order: no tracking, MLflow (a real `mlflow server` on loopback, SQLite), TensorBoard
(event files in a temp dir), both, and Weights & Biases in its offline mode (its own files; no server here).
Each side trains --epochs epochs, checkpoints every 50 steps, with logEvery 20 (the example's) and with
--log-every (every step by default: the worst case). Measured per optimizer step in the steady state, between
the first and the last train line: wall time (best of --rounds: the least disturbed by the machine's other
work), CPU of the whole process (median; the trackers' threads included) and CPU of the training thread
(median; what the training loop itself pays). Each side against no tracking.

    .venv/bin/python benchmarks/ab_tracking.py [--rounds 5] [--epochs 4] [--log-every 1]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubetrain.metrics import parse_metrics_line

REPO = Path(__file__).resolve().parents[1]


def tracking_env(side: str, uri: str, logdir: str) -> dict[str, Any]:
    config: dict[str, Any] = {"runName": "digits-bench", "bufferPoints": 100_000, "spec": {"spec": {}},
                              "tags": {"kubetrain.job": "digits-bench", "kubetrain.namespace": "bench"}}
    if side in ("mlflow", "both"):
        config["mlflow"] = {"trackingUri": uri, "experiment": "bench"}
    if side in ("tensorboard", "both"):
        config["tensorboard"] = {"logDir": logdir}
    if side == "wandb":
        config["wandb"] = {"project": "bench"}
    return config


class Clocks(io.StringIO):
    """The metrics stream, noting the clocks whenever a train line is written: steady state only (the run's
    set-up, its tracker's connection, and the final artifacts and flush are outside the first and last)."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[tuple[int, float, float, float]] = []  # step, wall, process CPU, this thread's CPU

    def write(self, text: str) -> int:
        record = parse_metrics_line(text)
        if record is not None and record["kind"] == "train":
            self.marks.append((record["step"], time.perf_counter(), time.process_time(), time.thread_time()))
        return super().write(text)


SPENT = {"seconds": 0.0}  # the training thread's time inside the tracker (record, unsent) during one run


def timed(method: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            SPENT["seconds"] += time.perf_counter() - started
    return wrapper


def train_once(side: str, log_every: int, epochs: int, uri: str, workdir: Path) -> tuple[float, ...]:
    """Per optimizer step between the first and the last train line: wall seconds, CPU seconds of the whole
    process (the trackers' threads included), CPU seconds of the training thread; and per step of the whole
    run, the seconds the training thread spent in the tracker (appending points, handing the unsent ones to
    each checkpoint)."""
    from kubetrain.jobspec.sections import Checkpoint, Train
    from kubetrain.runtime.trainer import Trainer

    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    os.environ.pop("KUBETRAIN_TRACKING", None)
    if side != "none":
        os.environ["KUBETRAIN_TRACKING"] = json.dumps(tracking_env(side, uri, str(run_dir / "tb")))
        os.environ["KUBETRAIN_TRACKING_KEY"] = run_dir.name
    train = Train(model="digits_task:build_model", dataset="digits_task:build_datasets",
                  scheduler="digits_task:build_scheduler", epochs=epochs, batchSize=32, lr=0.003, logEvery=log_every)
    stream = Clocks()
    SPENT["seconds"] = 0.0
    result = Trainer(train, Checkpoint(dir=str(run_dir / "ckpt"), everySteps=50), stream=stream).fit()
    (first, *begin), (last, *end) = stream.marks[0], stream.marks[-1]
    steady = tuple((b - a) / (last - first) for a, b in zip(begin, end, strict=True))
    return (*steady, SPENT["seconds"] / result.step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--log-every", type=int, default=1)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "examples" / "digits"))
    os.environ.update({"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "WANDB_MODE": "offline",
                       "WANDB_SILENT": "true"})
    from kubetrain.runtime.tracking import Tracker
    from tests.testenv.mlflowserver import MLflowServer

    Tracker.record = timed(Tracker.record)  # type: ignore[method-assign]
    Tracker.unsent = timed(Tracker.unsent)  # type: ignore[method-assign]

    sides = ["none", "mlflow", "tensorboard", "both", "wandb"]
    with tempfile.TemporaryDirectory() as temp:
        workdir = Path(temp)
        (workdir / "mlflow").mkdir()
        server = MLflowServer(workdir / "mlflow").start()
        try:
            for log_every in (20, args.log_every):
                results: dict[str, list[tuple[float, ...]]] = {side: [] for side in sides}
                for round_no in range(args.rounds):
                    for side in sides[round_no % len(sides):] + sides[:round_no % len(sides)]:
                        results[side].append(train_once(side, log_every, args.epochs, server.uri, workdir))
                report(log_every, results)
        finally:
            server.stop()


def report(log_every: int, results: dict[str, list[tuple[float, ...]]]) -> None:
    def summary(side: str) -> tuple[float, float, float]:
        values = results[side]
        return (min(v[0] for v in values), statistics.median(v[1] for v in values),
                statistics.median(v[2] for v in values))

    base = summary("none")
    print(f"\nlogEvery {log_every}, ms per step: side | wall (best) | process CPU (median) | training thread CPU "
          "(median), each with its difference to none | training thread in the tracker (median, % of none's "
          "best wall)")
    for side, runs in results.items():
        cells = [f"{value * 1000:7.3f} ({100 * (value / ref - 1):+6.2f} %)" for value, ref in zip(summary(side), base,
                                                                                               strict=True)]
        inside = statistics.median(v[3] for v in runs)
        cells.append(f"{inside * 1000:7.4f} ({100 * inside / base[0]:.3f} %)")
        print(f"{side:12} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
