"""A tiny job for the runtime's fault-tolerance tests (imported by the training processes).

* FT_SLEEP: seconds each sample takes to load, so a test has time to interfere mid-training (only on the
  ranks listed in FT_SLEEP_RANKS, e.g. "1", when set: a straggler);
* FT_SLOW_SAVE_FLAG: while this file exists, the model's extra state takes FT_SLOW_SAVE_SECONDS to pickle
  (touching FT_SLOW_SAVE_FLAG + ".writing" first), so a test can kill rank 0 in the middle of a checkpoint;
* FT_EVAL_SLEEP: seconds each eval sample takes to load (a longer eval);
* FT_EVAL_STOP_FLAG: when this file exists, rank 1 removes it and SIGSTOPs itself in its next eval sample
  (a rank stopped while the others evaluate).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset


class SlowDataset(Dataset[Any]):
    def __init__(self, inner: TensorDataset) -> None:
        self.inner = inner
        self.sleep = float(os.environ.get("FT_SLEEP", "0"))
        ranks = os.environ.get("FT_SLEEP_RANKS")
        if ranks and os.environ.get("RANK", "0") not in ranks.split(","):
            self.sleep = 0.0

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> Any:
        if self.sleep:
            time.sleep(self.sleep)
        return self.inner[index]


class EvalDataset(Dataset[Any]):
    def __init__(self, inner: TensorDataset) -> None:
        self.inner = inner
        self.sleep = float(os.environ.get("FT_EVAL_SLEEP", "0"))
        self.stop_flag = os.environ.get("FT_EVAL_STOP_FLAG") if os.environ.get("RANK") == "1" else None

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> Any:
        if self.stop_flag and os.path.exists(self.stop_flag):
            os.remove(self.stop_flag)
            os.kill(os.getpid(), signal.SIGSTOP)
        if self.sleep:
            time.sleep(self.sleep)
        return self.inner[index]


def build_datasets() -> tuple[Dataset[Any], Dataset[Any]]:
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(640, 16, generator=generator)
    y = (x[:, :4].argmax(dim=1)).long()
    return SlowDataset(TensorDataset(x[:512], y[:512])), EvalDataset(TensorDataset(x[512:], y[512:]))


class SlowPickle:
    """Pickling this takes a while: the checkpoint's temp file exists, the rename has not happened."""

    def __reduce__(self) -> tuple[Any, ...]:
        flag = os.environ["FT_SLOW_SAVE_FLAG"]
        Path(flag + ".writing").touch()
        time.sleep(float(os.environ.get("FT_SLOW_SAVE_SECONDS", "60")))
        return (int, (0,))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def get_extra_state(self) -> Any:
        flag = os.environ.get("FT_SLOW_SAVE_FLAG")
        return SlowPickle() if flag and os.path.exists(flag) else 0

    def set_extra_state(self, state: Any) -> None:
        pass


def build_model() -> nn.Module:
    return Net()


def build_optimizer(params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int) -> Any:
    return torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0, end_factor=0.1, total_iters=total_steps)
