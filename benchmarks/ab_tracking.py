"""A/B: what logging to each tracker costs per training step on the digits model (target: < 1 %).

One process (world size 1, gloo, CPU) trains the digits example with the Trainer API; the sides alternate in
one run, in rotating order: no tracking, MLflow (a real `mlflow server` on loopback, SQLite), TensorBoard
(event files in a temp dir), and both. Each side trains --epochs epochs with logEvery 20 (the example's) and
with --log-every (every step by default: the worst case). Per side: wall seconds per optimizer step between
the `start` and `end` records (best of --rounds: the least disturbed by the machine's other work), and CPU
seconds of the whole process per step (median: the trackers' threads included). The cost is each side
against no tracking.

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

REPO = Path(__file__).resolve().parents[1]


def tracking_env(side: str, uri: str, logdir: str) -> dict[str, Any]:
    config: dict[str, Any] = {"runName": "digits-bench", "bufferPoints": 100_000, "spec": {"spec": {}},
                              "tags": {"kubetrain.job": "digits-bench", "kubetrain.namespace": "bench"}}
    if side in ("mlflow", "both"):
        config["mlflow"] = {"trackingUri": uri, "experiment": "bench"}
    if side in ("tensorboard", "both"):
        config["tensorboard"] = {"logDir": logdir}
    return config


def train_once(side: str, log_every: int, epochs: int, uri: str, workdir: Path) -> tuple[float, float]:
    """(wall seconds per step from start to end record, process CPU seconds per step) for one side."""
    from kubetrain.jobspec.sections import Checkpoint, Train
    from kubetrain.metrics import parse_metrics_line
    from kubetrain.runtime.trainer import Trainer

    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    os.environ.pop("KUBETRAIN_TRACKING", None)
    if side != "none":
        os.environ["KUBETRAIN_TRACKING"] = json.dumps(tracking_env(side, uri, str(run_dir / "tb")))
        os.environ["KUBETRAIN_TRACKING_KEY"] = run_dir.name
    train = Train(model="digits_task:build_model", dataset="digits_task:build_datasets",
                  scheduler="digits_task:build_scheduler", epochs=epochs, batchSize=32, lr=0.003, logEvery=log_every)
    stream = io.StringIO()
    cpu = time.process_time()
    result = Trainer(train, Checkpoint(dir=str(run_dir / "ckpt"), everySteps=50), stream=stream).fit()
    cpu = time.process_time() - cpu
    records = [r for r in map(parse_metrics_line, stream.getvalue().splitlines()) if r]
    start = next(r["time"] for r in records if r["kind"] == "start")
    end = next(r["time"] for r in records if r["kind"] == "end")
    return (end - start) / result.step, cpu / result.step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--log-every", type=int, default=1)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "examples" / "digits"))
    os.environ.update({"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
    from tests.testenv.mlflowserver import MLflowServer

    sides = ["none", "mlflow", "tensorboard", "both"]
    with tempfile.TemporaryDirectory() as temp:
        workdir = Path(temp)
        (workdir / "mlflow").mkdir()
        server = MLflowServer(workdir / "mlflow").start()
        try:
            for log_every in (20, args.log_every):
                results: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
                for round_no in range(args.rounds):
                    for side in sides[round_no % len(sides):] + sides[:round_no % len(sides)]:
                        results[side].append(train_once(side, log_every, args.epochs, server.uri, workdir))
                report(log_every, results)
        finally:
            server.stop()


def report(log_every: int, results: dict[str, list[tuple[float, float]]]) -> None:
    base_wall = min(w for w, _ in results["none"])
    base_cpu = statistics.median(c for _, c in results["none"])
    print(f"\nlogEvery {log_every}: side | wall ms/step (best) | vs none | CPU ms/step (median) | vs none")
    for side, values in results.items():
        wall = min(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        print(f"{side:12} | {wall * 1000:8.3f} | {100 * (wall / base_wall - 1):+6.2f} % | {cpu * 1000:8.3f} | "
              f"{100 * (cpu / base_cpu - 1):+6.2f} %")


if __name__ == "__main__":
    main()
