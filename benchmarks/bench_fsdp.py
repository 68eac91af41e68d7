"""FSDP2 (strategy: fsdp) against DDP and a hand-written FSDP2 loop: peak memory per rank and throughput.

    python benchmarks/bench_fsdp.py            # 2 processes, gloo, CPU; a few minutes on 2 cores

The model is parameter-dominated (wide Linear layers, tiny batches), so the memory a rank needs is mostly
parameters + gradients + AdamW's two moments: DDP keeps all of it on every rank, FSDP2 a 1/world share
(plus one unit's gathered parameters at a time). Memory is the rise of the process's peak RSS (ru_maxrss)
from just before the model is built; on GPUs the same comparison would use torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WIDTH, LAYERS, BATCH, STEPS, WARMUP = 1536, 8, 8, 12, 2


def make_model() -> Any:
    from torch import nn

    return nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(LAYERS)])


def make_data() -> Any:
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH * 2 * (STEPS + WARMUP), WIDTH, generator=generator)
    return TensorDataset(x, x.roll(1, dims=1))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def plain_fsdp() -> dict[str, float]:
    """The hand-written FSDP2 loop: fully_shard per block and the root, AdamW, MSE."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    base = peak_mb()
    model = make_model()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dataset = make_data()
    loader = DataLoader(dataset, batch_size=BATCH, sampler=DistributedSampler(dataset, seed=0))
    started = 0.0
    for step, (x, y) in enumerate(loader):
        if step == WARMUP:
            started = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    elapsed = time.perf_counter() - started
    result = {"peak_rise_mb": peak_mb() - base, "samples_per_s": STEPS * BATCH * dist.get_world_size() / elapsed}
    dist.destroy_process_group()
    return result


def trainer(strategy: str) -> dict[str, float]:
    """The kubetrain Trainer with the same model, data and optimizer."""
    import io

    import torch

    from kubetrain.jobspec.sections import Train
    from kubetrain.metrics import parse_metrics_line
    from kubetrain.runtime import Factories, Trainer

    base = peak_mb()
    stream = io.StringIO()
    train = Train(model="bench:model", dataset="bench:data", batchSize=BATCH, lr=1e-4, logEvery=1,
                  strategy=strategy, backend="gloo")  # type: ignore[arg-type]
    Trainer(train, None, Factories(make_model, make_data, loss=lambda: torch.nn.functional.mse_loss),
            stream=stream).fit()
    steps = [r for r in map(parse_metrics_line, stream.getvalue().splitlines()) if r and r["kind"] == "train"]
    first, last = steps[WARMUP - 1], steps[-1]
    rate = (last["step"] - first["step"]) * BATCH * 2 / (last["time"] - first["time"])
    return {"peak_rise_mb": peak_mb() - base, "samples_per_s": rate}


def launch(side: str) -> list[dict[str, float]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "KUBETRAIN_LOG_ALL_RANKS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", __file__,
            "worker", side]
    result = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=1800, check=False)
    if result.returncode:
        raise SystemExit(f"{side} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return [json.loads(line.split("BENCH ", 1)[1]) for line in result.stdout.splitlines() if "BENCH " in line]


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        side = sys.argv[2]
        result = plain_fsdp() if side == "plain-fsdp" else trainer(side)
        print("BENCH " + json.dumps({"rank": int(os.environ["RANK"]), **result}), flush=True)
        from kubetrain.runtime import exit_process

        exit_process(0)
    params = LAYERS * (WIDTH * WIDTH + WIDTH)
    print(f"model: {LAYERS} x Linear({WIDTH}, {WIDTH}) = {params / 1e6:.1f} M parameters "
          f"({params * 4 / 2**20:.0f} MiB fp32; + grads + 2 AdamW moments = {params * 16 / 2**20:.0f} MiB)")
    print("| side | peak RSS rise per rank (MiB) | samples/s |\n| --- | --- | --- |")
    for side in ("ddp", "fsdp", "plain-fsdp"):
        ranks = sorted(launch(side), key=lambda r: r["rank"])
        memory = ", ".join(f"{r['peak_rise_mb']:.0f}" for r in ranks)
        print(f"| {side} | {memory} | {ranks[0]['samples_per_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
