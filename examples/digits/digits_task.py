"""The digits example's code for the Trainer API: a small CNN on scikit-learn's bundled 8x8 digits.

The data ships inside scikit-learn (the file behind `sklearn.datasets.load_digits`: 1,797 images, 10 classes), so
nothing is downloaded. A fixed permutation holds out 300 images; the Trainer reports accuracy on them after each epoch.

Referenced from kubetrain.yaml as `digits_task:build_model`, `digits_task:build_datasets`, ...
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

HELD_OUT = 300
SPLIT_SEED = 0


def read_digits() -> tuple[np.ndarray, np.ndarray]:
    """(pixels of shape (1797, 64) in 0..16, labels), what `sklearn.datasets.load_digits()` returns, read from the
    file scikit-learn ships. Importing `sklearn.datasets` loads SciPy too: about 1.4 s of CPU in every rank."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the digits example needs scikit-learn (pip install 'kubetrain[examples]')")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as handle:
        data = np.loadtxt(handle, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int)


def load_arrays() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train images, train labels, held-out images, held-out labels); images are 1x8x8 in [0, 1]."""
    pixels, target = read_digits()
    images = torch.tensor(pixels.reshape(-1, 8, 8) / 16.0, dtype=torch.float32).unsqueeze(1)
    labels = torch.tensor(target, dtype=torch.long)
    order = torch.from_numpy(np.random.RandomState(SPLIT_SEED).permutation(len(labels)))
    test, train = order[:HELD_OUT], order[HELD_OUT:]
    return images[train], labels[train], images[test], labels[test]


def build_datasets() -> tuple[TensorDataset, TensorDataset]:
    """The dataset factory: a (train, held-out) pair."""
    x_train, y_train, x_test, y_test = load_arrays()
    return TensorDataset(x_train, y_train), TensorDataset(x_test, y_test)


def build_model() -> nn.Module:
    """The model factory: two 3x3 convolutions, max-pooling, dropout, a linear classifier."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.2),
        nn.Linear(32 * 4 * 4, 10),
    )


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int) -> torch.optim.lr_scheduler.LRScheduler:
    """The scheduler factory: cosine decay over the whole run (stepped once per optimizer step)."""
    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)
