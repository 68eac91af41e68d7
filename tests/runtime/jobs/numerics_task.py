"""Two-process numerics of the Trainer (run by tests/runtime/test_strategies.py under torchrun, 2 workers).

    torchrun --standalone --nproc-per-node 2 numerics_task.py OUT_DIR

Each rank runs several Trainer configurations in turn and writes what it observed to OUT_DIR/rank-R.json:

* `k1` (batch 16) and `k2` (gradAccumSteps 2, batch 8): the optimizer-step losses, the final parameters and
  how many gradient reductions DDP performed (a counting comm hook). 108 samples per rank make the last
  group of `k2` a full and a short micro-batch (8 + 4), the same samples as `k1`'s short last batch (12).
* `bf16` under ddp and fsdp: the dtype a Linear layer produced inside the training forward;
* `fsdp` (fp32, same seed and data as `k1`): losses to compare with DDP's, and sharded checkpoints (async
  writes) in OUT_DIR/ckpt for the test's resharded resume on one process;
* `reshard` (when OUT_DIR/one exists: a finished fsdp run of one process, written by the test): resumed by
  2 ranks (1 -> 2 resharding), the held-out loss of the resharded weights;
* `profile`: the profiler on rank 1 only (traces under OUT_DIR/prof/rank-1), its `profile` records;
* `fsdp_s3` (when NUMERICS_S3_URL is set): sharded async checkpoints on S3 (FsspecWriter, manifest last).
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.utils.data import TensorDataset

from kubetrain.metrics import parse_metrics_line
from kubetrain.runtime import Factories, Trainer
from kubetrain.runtime.distributed import distributed, exit_process, init_distributed
from kubetrain.runtime.settings import FSDP, Checkpoint, Profile, Train

SAMPLES = 216  # 108 per rank
HELD_OUT = 33


def data() -> tuple[TensorDataset, TensorDataset]:
    """Training samples, and 33 held-out ones: 17 on rank 0 (2 batches of 16), 16 on rank 1 (1 batch)."""
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(SAMPLES + HELD_OUT, 6, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return TensorDataset(x[:SAMPLES], y[:SAMPLES]), TensorDataset(x[SAMPLES:], y[SAMPLES:])


class Probe(nn.Module):
    """An MLP that records the dtype its first layer produces in training forwards."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(6, 12)
        self.second = nn.Linear(12, 2)
        self.seen: set[str] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.first(x)
        if self.training:
            self.seen.add(str(hidden.dtype))
        return self.second(torch.relu(hidden))


def sgd(params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr)


def run(train: Train, hook: bool = False, checkpoint: Checkpoint | None = None) -> dict[str, Any]:
    """One Trainer run; with `hook`, DDP's reductions are counted (and still performed)."""
    models: list[Probe] = []
    calls = [0]

    def build() -> nn.Module:
        models.append(Probe())
        return models[-1]

    def counting(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects string annotations
        calls[0] += 1
        return default_hooks.allreduce_hook(state, bucket)

    stream = io.StringIO()
    trainer = Trainer(train, checkpoint, Factories(build, data, optimizer=sgd), stream=stream)
    # one process group for all runs (main): torchrun's shared store keeps the first group's gloo
    # addresses, so a second init_process_group in the same worker may dial a closed port
    env = init_distributed(train.backend)
    loop = trainer._setup(env)  # the Trainer's own loop, with a hook on its DDP module
    if hook:
        assert loop.wrapped.ddp is not None
        loop.wrapped.ddp.register_comm_hook(dist.group.WORLD, counting)
    loop.run()
    params = [p.detach().full_tensor() if hasattr(p, "full_tensor") else p.detach()
              for p in loop.wrapped.module.parameters()]
    del loop
    records = [r for r in map(parse_metrics_line, stream.getvalue().splitlines()) if r]
    return {"losses": [r["loss"] for r in records if r["kind"] == "train"],
            "params": [p.flatten().tolist() for p in params], "reductions": calls[0],
            "dtypes": sorted(models[0].seen), "eval_loss": [r["eval_loss"] for r in records if r["kind"] == "eval"],
            "profiles": [r for r in records if r["kind"] == "profile"],
            "resumed": [r for r in records if r["kind"] == "resume"]}


def main() -> None:
    out = Path(sys.argv[1])
    with distributed("gloo"):
        result = runs(out)
    (out / f"rank-{os.environ['RANK']}.json").write_text(json.dumps(result))


def runs(out: Path) -> dict[str, Any]:
    common = {"model": "numerics_task:Probe", "dataset": "numerics_task:data", "lr": 0.1, "seed": 3,
              "logEvery": 1, "backend": "gloo"}
    extra: dict[str, Any] = {}
    if (out / "one").is_dir():
        extra["reshard"] = run(Train(**common, batchSize=16, epochs=1, strategy="fsdp"),
                               checkpoint=Checkpoint(dir=str(out / "one")))
    if os.environ.get("NUMERICS_S3_URL"):
        extra["fsdp_s3"] = run(Train(**common, batchSize=16, strategy="fsdp", fsdp=FSDP(asyncCheckpoint=True)),
                               checkpoint=Checkpoint(dir=os.environ["NUMERICS_S3_URL"], everySteps=3))
    profile = Profile(dir=str(out / "prof"), wait=1, warmup=1, active=2, repeat=1, ranks=[1])
    return {
        **extra,
        "profile": run(Train(**common, batchSize=16, epochs=1, profile=profile)),
        "k1": run(Train(**common, batchSize=16), hook=True),
        "k2": run(Train(**common, batchSize=8, gradAccumSteps=2), hook=True),
        "bf16_ddp": run(Train(**common, batchSize=16, precision="bf16")),
        "bf16_fsdp": run(Train(**common, batchSize=16, precision="bf16", strategy="fsdp")),
        "fsdp": run(Train(**common, batchSize=16, strategy="fsdp", fsdp=FSDP(asyncCheckpoint=True)),
                    checkpoint=Checkpoint(dir=str(out / "ckpt"), everySteps=3)),
    }


if __name__ == "__main__":
    main()
    exit_process(0)  # no interpreter finalization with gloo threads alive (docs/runtime.md, Exits)
