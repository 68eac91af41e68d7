"""Data loading: a DistributedSampler that can resume mid-epoch, and loaders configured for the device."""

from __future__ import annotations

import signal
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from kubetrain.runtime.config import RuntimeConfigError
from kubetrain.runtime.distributed import DistEnv


class ResumableSampler(DistributedSampler[Any]):
    """DistributedSampler (shuffled per epoch via set_epoch) that can skip the samples already trained on.

    `skip(n)` applies to the next iteration only: after a resume the epoch continues where the checkpoint
    left it, and the following epochs start from the beginning.
    """

    def __init__(self, dataset: Dataset[Any], env: DistEnv, seed: int) -> None:
        super().__init__(dataset, num_replicas=env.world_size, rank=env.rank, shuffle=True, seed=seed)
        self._skip = 0

    def skip(self, samples: int) -> None:
        self._skip = samples

    def __iter__(self) -> Iterator[Any]:
        indices = list(super().__iter__())
        skip, self._skip = self._skip, 0
        return iter(indices[skip:])

    def __len__(self) -> int:
        return int(self.num_samples) - self._skip


class ShardSampler(Sampler[int]):
    """Every rank takes indices rank, rank+world, ... with no padding, so held-out metrics are exact."""

    def __init__(self, size: int, env: DistEnv) -> None:
        self._indices = list(range(env.rank, size, env.world_size))

    def __iter__(self) -> Iterator[int]:
        return iter(self._indices)

    def __len__(self) -> int:
        return len(self._indices)


def split_datasets(result: Any) -> tuple[Dataset[Any], Dataset[Any] | None]:
    """The dataset factory returns a Dataset or a (train, eval) pair."""
    if isinstance(result, tuple | list) and len(result) == 2:
        train, held_out = result
    else:
        train, held_out = result, None
    for name, dataset in (("training", train), ("eval", held_out)):
        if dataset is not None and not (isinstance(dataset, Sized) and hasattr(dataset, "__getitem__")):
            raise RuntimeConfigError(f"spec.train.dataset: the {name} dataset must be a map-style Dataset "
                                     f"(with __len__ and __getitem__), got {type(dataset).__name__}")
    return train, held_out


def _ignore_stop_signals(_worker_id: int) -> None:
    """DataLoader workers leave SIGTERM/SIGINT to the main process, which checkpoints and shuts them down."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def make_loader(dataset: Dataset[Any], sampler: Sampler[Any], *, batch_size: int, num_workers: int,
                env: DistEnv, seed: int) -> DataLoader[Any]:
    """pin_memory and persistent workers on GPU; worker seeds come from a private generator, so the
    main process's RNG stream (saved in checkpoints) does not depend on when iterators are created."""
    gpu = env.device.type == "cuda"
    return DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers,
        pin_memory=gpu, persistent_workers=gpu and num_workers > 0,
        worker_init_fn=_ignore_stop_signals if num_workers else None,
        generator=torch.Generator().manual_seed(seed + env.rank),
    )


def to_device(batch: Any, device: torch.device) -> Any:
    """Move tensors (also inside tuples, lists and dicts) to an accelerator; non-blocking (pinned memory)."""
    if device.type == "cpu":
        return batch  # DataLoader batches are already on the CPU
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, tuple | list):
        return type(batch)(to_device(value, device) for value in batch)
    return batch


def batch_size_of(inputs: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    if isinstance(inputs, torch.Tensor):
        return int(inputs.shape[0]) if inputs.dim() else 1
    values = inputs.values() if isinstance(inputs, dict) else inputs
    for value in values if isinstance(values, tuple | list) else list(values):
        return batch_size_of(value)
    return 0
