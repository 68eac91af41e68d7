"""A tiny Trainer job whose loss turns NaN at a chosen step (the NaN-injection drill, test_divergence.py).

* NAN_AT_STEP=N: from this process's N-th training forward on (gradAccumSteps 1: its N-th step), the loss is
  multiplied by NaN; held-out forwards (under no_grad) are left alone. Unset or 0: never.
* NAN_RANKS="1": only on these ranks (default: every rank).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset


def blobs(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())


def build_datasets() -> tuple[TensorDataset, TensorDataset]:
    return blobs(96, 0), blobs(32, 1)


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))


def build_optimizer(params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr)


class InjectedNaN:
    """Cross-entropy, times NaN from the `at`-th training call on (0: never)."""

    def __init__(self, at: int, ranks: set[str] | None = None) -> None:
        self.at = at
        self.calls = 0
        self.inner = nn.CrossEntropyLoss()
        self.here = ranks is None or os.environ.get("RANK", "0") in ranks

    def __call__(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = self.inner(output, target)
        if not torch.is_grad_enabled():
            return loss
        self.calls += 1
        if self.here and self.at and self.calls >= self.at:
            return loss * float("nan")
        return loss


def injected(at: int, ranks: set[str] | None = None) -> Callable[[], InjectedNaN]:
    return lambda: InjectedNaN(at, ranks)


def build_loss() -> InjectedNaN:
    ranks = os.environ.get("NAN_RANKS")
    return InjectedNaN(int(os.environ.get("NAN_AT_STEP", "0") or 0), set(ranks.split(",")) if ranks else None)
