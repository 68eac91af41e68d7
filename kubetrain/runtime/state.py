"""Random-number-generator state: seeding, capture and restore (per rank), and gathering to rank 0."""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.distributed as dist

try:  # numpy is optional for torch; seed and save it when present
    import numpy
except ImportError:  # pragma: no cover
    numpy = None  # type: ignore[assignment]


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and every CUDA device)."""
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds CUDA
    if numpy is not None:
        numpy.random.seed(seed % 2**32)


def rng_state() -> dict[str, Any]:
    """This process's RNG states, as tensors and plain values (loadable with weights_only)."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": [version, list(internal), gauss]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if numpy is not None:
        kind, keys, pos, has_gauss, cached = numpy.random.get_state(legacy=True)
        state["numpy"] = [kind, numpy.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state and numpy is not None:
        kind, keys, pos, has_gauss, cached = state["numpy"]
        numpy.random.set_state((kind, numpy.array(keys, dtype=numpy.uint32), pos, has_gauss, cached))


def gather_to_all(value: Any, world_size: int) -> list[Any]:
    """Every rank's `value`, indexed by rank (a collective: all ranks must call it at the same point)."""
    if world_size == 1:
        return [value]
    values: list[Any] = [None] * world_size
    dist.all_gather_object(values, value)
    return values


def broadcast_from_main(value: Any, world_size: int) -> Any:
    """Rank 0's `value` on every rank (a collective)."""
    if world_size == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]
