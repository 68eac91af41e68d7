"""Benchmark: the kubetrain Trainer vs a plain hand-written DDP loop, and `kubetrain run` start-up.

Same model, data, seed, optimizer and batch size; 2 processes, gloo, CPU (torchrun --standalone).

* throughput: samples/s between two steps after warm-up, from each side's own metrics lines. Four sides
  run in rotating order, `--repeats` rounds: the plain loop with DDP's defaults, the plain loop with the
  Trainer's DDP defaults (gradient_as_bucket_view=True, bucket_cap_mb=25), the Trainer, and the Trainer
  with checkpointing on. The ratio of the fastest run of each side is reported (target >= 0.97);
* losses: a shorter run logging every step; the all-rank mean loss must be identical at every step, and the
  final parameters bit-identical;
* start-up: wall time from `kubetrain run -f examples/digits/kubetrain.yaml` to its first step, its first
  metrics line, and the end of the run (2 nodes x 1 process).

    python benchmarks/bench_runtime.py                       # prints the results table
    python benchmarks/bench_runtime.py --write-docs          # also updates docs/runtime.md

Not a test: numbers depend on the machine. torch is needed (pip install -e '.[runtime,examples]').
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "runtime.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
FEATURES, HIDDEN, CLASSES, BATCH, LR, SEED = 256, 1024, 10, 64, 1e-3, 0


# --- the workload (identical for both sides) ---------------------------------------------------------------
def make_data(samples: int) -> Any:
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(samples, FEATURES, generator=generator)
    return TensorDataset(x, torch.randint(0, CLASSES, (samples,), generator=generator))


def make_model() -> Any:
    from torch import nn

    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, CLASSES))


def emit(**fields: Any) -> None:
    from kubetrain.metrics import format_metrics

    print(format_metrics("train", time=time.time(), **fields), flush=True)


# --- the two sides (run under torchrun) ----------------------------------------------------------------
def plain_loop(samples: int, epochs: int, log_every: int, out: str, *, same_ddp: bool = False) -> None:
    """The textbook DDP loop: model to device, DDP, DistributedSampler, zero_grad/forward/backward/step.
    `same_ddp` gives DDP the Trainer's defaults: gradient_as_bucket_view=True (DDP's own default: False) and
    an explicit bucket_cap_mb=25, which also makes the first bucket 25 MiB (DDP's default: 1 MiB)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(SEED)
    dataset = make_data(samples)
    options = {"gradient_as_bucket_view": True, "bucket_cap_mb": 25} if same_ddp else {}
    model = DistributedDataParallel(make_model(), **options)
    torch.manual_seed(SEED + rank)
    sampler = DistributedSampler(dataset, seed=SEED)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    step = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if step % log_every == 0:
                mean = torch.stack([loss.detach().double(), torch.tensor(1.0, dtype=torch.float64)])
                dist.all_reduce(mean)
                if rank == 0:
                    emit(rank=0, step=step, loss=float(mean[0] / mean[1]))
    if rank == 0:
        torch.save(model.module.state_dict(), out)
    del model, optimizer
    dist.destroy_process_group()


def trainer_loop(samples: int, epochs: int, log_every: int, out: str, *, checkpoint_dir: str | None = None,
                 divergence: str = "stop") -> None:
    import torch

    from kubetrain.jobspec.sections import Checkpoint, Divergence, Train
    from kubetrain.runtime import Factories, Trainer

    built: list[Any] = []

    def model() -> Any:
        built.append(make_model())
        return built[-1]

    train = Train(model="bench:model", dataset="bench:data", epochs=epochs, batchSize=BATCH, lr=LR, seed=SEED,
                  logEvery=log_every, backend="gloo")
    checkpoint = Checkpoint(dir=checkpoint_dir, keep=1)
    Trainer(train, checkpoint, factories=Factories(model=model, dataset=lambda: make_data(samples)),
            divergence=Divergence(policy=divergence)).fit()  # type: ignore[arg-type]
    if os.environ.get("RANK", "0") == "0":
        torch.save(built[0].state_dict(), out)


# --- the driver -----------------------------------------------------------------------------------------
def launch_argv(side: str, samples: int, epochs: int, log_every: int, out: Path, *, wrapper: list[str] | None = None,
                env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of one run. `wrapper` goes before torchrun (bench_archive.py: the archive wrapper)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    argv = [*(wrapper or []), sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            __file__, "worker", side, str(samples), str(epochs), str(log_every), str(out)]
    return argv, env


def train_records(stdout: str) -> list[dict[str, Any]]:
    from kubetrain.metrics import parse_metrics_line

    records = [parse_metrics_line(line) for line in stdout.splitlines()]
    return [r for r in records if r and r["kind"] == "train"]


def launch(side: str, samples: int, epochs: int, log_every: int, out: Path) -> list[dict[str, Any]]:
    argv, env = launch_argv(side, samples, epochs, log_every, out)
    result = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    if result.returncode:
        raise SystemExit(f"{side} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return train_records(result.stdout)


def throughput(records: list[dict[str, Any]], warmup_step: int) -> float:
    first = next(r for r in records if r["step"] == warmup_step)
    last = records[-1]
    return (last["step"] - first["step"]) * BATCH * 2 / (last["time"] - first["time"])


def bench_throughput(repeats: int, samples: int, epochs: int, workdir: Path) -> dict[str, Any]:
    log_every = 32
    sides = ("plain", "plain-same", "trainer", "trainer-ckpt")
    rates: dict[str, list[float]] = {side: [] for side in sides}
    for index in range(repeats):
        for side in sides[index % 4:] + sides[:index % 4]:  # rotate the order between rounds
            records = launch(side, samples, epochs, log_every, workdir / f"{side}-{index}.pt")
            rates[side].append(throughput(records, warmup_step=log_every))
    best = {side: max(values) for side, values in rates.items()}
    steps = samples // (2 * BATCH) * epochs
    return {"rates": rates, "best": best, "steps": steps, "timed_steps": steps - log_every,
            "ratio_same_ddp": best["trainer"] / best["plain-same"],
            "ratio_ckpt": best["trainer-ckpt"] / best["plain-same"],
            "ratio_defaults": best["trainer"] / best["plain"]}


def bench_losses(workdir: Path) -> dict[str, Any]:
    import torch

    samples, epochs = 2560, 2
    runs = {side: launch(side, samples, epochs, 1, workdir / f"loss-{side}.pt") for side in ("plain", "trainer")}
    plain = [(r["step"], r["loss"]) for r in runs["plain"]]
    trainer = [(r["step"], r["loss"]) for r in runs["trainer"]]
    a, b = (torch.load(workdir / f"loss-{side}.pt", weights_only=True) for side in ("plain", "trainer"))
    return {"steps": len(plain), "identical": plain == trainer,
            "params_identical": a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a),
            "first_loss": plain[0][1], "last_loss": plain[-1][1]}


def bench_startup(repeats: int) -> dict[str, Any]:
    from kubetrain.metrics import parse_metrics_line

    results: list[tuple[float, float, float]] = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as volume:
            started = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", "kubetrain", "run", "-f", "examples/digits/kubetrain.yaml",
                                     "--volume", f"ckpt={volume}"], cwd=REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
            first_step = first_log = None
            assert proc.stdout is not None
            for line in proc.stdout:
                record = parse_metrics_line(line)
                if record and record["kind"] == "start" and first_step is None:
                    first_step = time.monotonic() - started
                if record and record["kind"] == "train" and first_log is None:
                    first_log = time.monotonic() - started
            proc.wait()
            if proc.returncode or first_step is None or first_log is None:
                raise SystemExit("kubetrain run of the example failed")
            results.append((first_step, first_log, time.monotonic() - started))
    first_steps, first_logs, totals = zip(*results, strict=True)
    return {"first_step": statistics.median(first_steps), "first_log": statistics.median(first_logs),
            "total": statistics.median(totals), "runs": results}


def table(result: dict[str, Any]) -> str:
    tp, loss, start = result["throughput"], result["losses"], result["startup"]
    names = {"plain": "plain DDP loop, DDP defaults", "plain-same": "plain DDP loop, the Trainer's DDP options",
             "trainer": "kubetrain Trainer", "trainer-ckpt": "kubetrain Trainer with checkpoint.dir set"}
    rows = ["| measurement | result |", "| --- | --- |"]
    for side, name in names.items():
        runs = ", ".join(f"{rate:,.0f}" for rate in tp["rates"][side])
        rows.append(f"| {name}: samples/s, fastest (all runs) | {tp['best'][side]:,.0f} ({runs}) |")
    rows += [
        f"| **ratio Trainer / plain loop with the same DDP options** (target >= 0.97) | "
        f"**{tp['ratio_same_ddp']:.3f}** |",
        f"| ratio Trainer with checkpointing (stop agreement every ~0.2 s) / same plain loop | "
        f"{tp['ratio_ckpt']:.3f} |",
        f"| ratio Trainer / plain loop with DDP's defaults | {tp['ratio_defaults']:.3f} |",
        f"| losses, {loss['steps']} steps logged every step | "
        f"{'identical at every step' if loss['identical'] else '**DIFFERENT**'} |",
        f"| final parameters after those steps | {'bit-identical' if loss['params_identical'] else '**DIFFERENT**'} |",
        f"| `kubetrain run` digits example (2 nodes): start to first step (median of {len(start['runs'])}) | "
        f"{start['first_step']:.1f} s |",
        f"| ... to its first metrics line (step 20) | {start['first_log']:.1f} s |",
        f"| ... whole run, 288 steps, 12 epochs | {start['total']:.1f} s |",
    ]
    setup = (f"Setup: 2 processes, gloo, CPU, OMP_NUM_THREADS=1; MLP {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}, "
             f"batch {BATCH} per process, AdamW; throughput over {tp['timed_steps']} steps after "
             f"{tp['steps'] - tp['timed_steps']} warm-up steps; {len(tp['rates']['plain'])} rounds, sides in "
             f"rotating order; ratios of the fastest run of each side (on a shared VM, interference only slows "
             f"runs down). Machine: {result['machine']}.")
    return "\n".join([setup, "", *rows])


def write_docs(text: str) -> None:
    doc = DOCS.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOCS} has no {BEGIN} ... {END} section")
    head, rest = doc.split(BEGIN, 1)
    DOCS.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        side, samples, epochs, log_every, out = sys.argv[2:7]
        if side.startswith("trainer"):
            checkpoints = str(Path(out).with_suffix(".ckpt")) if side == "trainer-ckpt" else None
            policy = "continue" if side == "trainer-continue" else "stop"  # bench_divergence.py's other side
            trainer_loop(int(samples), int(epochs), int(log_every), out, checkpoint_dir=checkpoints, divergence=policy)
        else:
            plain_loop(int(samples), int(epochs), int(log_every), out, same_ddp=side == "plain-same")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="throughput pairs (default 3)")
    parser.add_argument("--samples", type=int, default=32768, help="training samples per epoch")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--startup-repeats", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true", help=f"update the table in {DOCS.relative_to(REPO)}")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = {
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}, "
                       f"torch {__import__('torch').__version__}",
            "throughput": bench_throughput(args.repeats, args.samples, args.epochs, Path(tmp)),
            "losses": bench_losses(Path(tmp)),
            "startup": bench_startup(args.startup_repeats),
        }
    print(json.dumps(result, indent=1))
    text = table(result)
    print(text)
    if args.write_docs:
        write_docs(text)


if __name__ == "__main__":
    main()
