"""FSDP2 with fsdp.metaInit under torchrun (gloo, CPU), for tests/runtime/test_meta_init.py.

    meta_init_task.py memory meta|eager OUT   build, shard and initialise BIG; OUT/memory-<mode>-<rank>.json
                                              holds the process's RSS growth over it and its parameter bytes
    meta_init_task.py train DIR EPOCHS        the Trainer with metaInit and sharded checkpoints in DIR
    meta_init_task.py memory MODE OUT DIR EPOCHS   both, in the same processes: one torchrun start-up
"""

from __future__ import annotations

import gc
import json
import resource
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from kubetrain.runtime import Trainer
from kubetrain.runtime.distributed import init_distributed, shutdown_distributed
from kubetrain.runtime.settings import FSDP, Checkpoint, Train
from kubetrain.runtime.wrap import meta_device, wrap_model

WIDTH, LAYERS = 4096, 8  # 8 x 4096 x 4096 fp32 weights: 512 MiB


class Big(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*(nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def memory(mode: str, out: Path) -> None:
    train = Train(model="meta_init_task:Big", dataset="meta_init_task:data", strategy="fsdp", backend="gloo",
                  fsdp=FSDP(metaInit=mode == "meta"))
    env = init_distributed("gloo")  # left running for a `train` after it
    gc.collect()
    before = max(_rss(), _peak())  # growth is measured from the high-water mark so far
    with meta_device(train):
        model = Big()
    wrap_model(model, train, env)
    growth = _peak() - before
    local = sum(p.to_local().numel() * p.element_size() for p in model.parameters())  # type: ignore[attr-defined]
    full = sum(p.numel() * p.element_size() for p in model.parameters())  # a DTensor's numel is the global one
    weight = model.layers[0].weight.to_local()  # type: ignore[operator]
    bound = 1 / WIDTH ** 0.5  # nn.Linear's kaiming_uniform_(a=sqrt(5)) bound for fan-in WIDTH
    result = {"growth": growth, "local": local, "full": full, "min": weight.min().item(),
              "max": weight.max().item(), "std": weight.std().item(), "bound": bound}
    (out / f"memory-{mode}-{env.rank}.json").write_text(json.dumps(result))


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(6, 16)
        self.second = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


def data() -> tuple[TensorDataset, TensorDataset]:
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(160, 6, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return TensorDataset(x[:128], y[:128]), TensorDataset(x[128:], y[128:])


def sgd(params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=0.9)  # momentum: optimizer state to resume too


def train(directory: str, epochs: int) -> None:
    Trainer(Train(model="meta_init_task:Small", dataset="meta_init_task:data", optimizer="meta_init_task:sgd",
                  lr=0.1, seed=3, batchSize=16, epochs=epochs, logEvery=1, strategy="fsdp", backend="gloo",
                  fsdp=FSDP(metaInit=True)),
            Checkpoint(dir=directory, everySteps=3, keep=10)).fit()


if __name__ == "__main__":
    if sys.argv[1] == "memory":
        memory(sys.argv[2], Path(sys.argv[3]))
        # then train in the same processes and process group (the Trainer joins it, and ends it): a second
        # process group in a torchrun worker hangs at its start
        if len(sys.argv) > 4:
            train(sys.argv[4], int(sys.argv[5]))
        shutdown_distributed()
    else:
        train(sys.argv[2], int(sys.argv[3]))
