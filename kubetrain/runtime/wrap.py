"""Model preparation: SyncBatchNorm, activation checkpointing, DDP, torch.compile; and mixed precision."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint

from kubetrain.runtime.distributed import DistEnv
from kubetrain.spec.sections import DDP, Train

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Wrapped:
    """The model three ways: `module` (plain, for state_dict and eval), `ddp`, and `forward` (what trains:
    the DDP module, compiled when asked)."""

    module: nn.Module
    ddp: DistributedDataParallel
    forward: Callable[..., Any]


def convert_sync_batchnorm(model: nn.Module, device: torch.device) -> nn.Module:
    """BatchNorm -> SyncBatchNorm. torch implements SyncBatchNorm for accelerators only: on CPU the
    model keeps per-process BatchNorm and a warning says so."""
    if device.type == "cpu":
        print("kubetrain.runtime: warning: syncBatchNorm needs a GPU; keeping BatchNorm on CPU",
              file=sys.stderr)
        return model
    converted: nn.Module = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]
    return converted


def _checkpointed(forward: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run


def apply_activation_checkpointing(model: nn.Module) -> int:
    """Recompute each top-level child with parameters during backward instead of storing its activations.
    Only `forward` is replaced, so parameter names (and checkpoints) are unchanged. Returns the count."""
    count = 0
    for child in model.children():
        if any(True for _ in child.parameters()):
            child.forward = _checkpointed(child.forward)
            count += 1
    return count


def ddp_kwargs(options: DDP, env: DistEnv) -> dict[str, Any]:
    """DistributedDataParallel arguments from the spec's DDP section."""
    return {
        "device_ids": [env.device.index] if env.device.type == "cuda" else None,
        "find_unused_parameters": options.findUnusedParameters,
        "static_graph": options.staticGraph,
        "gradient_as_bucket_view": options.gradientAsBucketView,
        "bucket_cap_mb": options.bucketCapMb,
    }


def wrap_model(model: nn.Module, train: Train, env: DistEnv) -> Wrapped:
    """Move to the device, apply the optional features in a safe order, wrap in DDP, then compile."""
    if train.syncBatchNorm:
        model = convert_sync_batchnorm(model, env.device)
    model = model.to(env.device)
    if train.activationCheckpointing:
        apply_activation_checkpointing(model)
    ddp = DistributedDataParallel(model, **ddp_kwargs(train.ddp, env))
    forward: Callable[..., Any] = torch.compile(ddp) if train.compile else ddp
    return Wrapped(model, ddp, forward)


def autocast(train: Train, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 or fp16 autocast; fp32 gets a no-op context (cheaper than a disabled autocast)."""
    if train.precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[train.precision])


def grad_scaler(train: Train, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 only: bf16 has fp32's exponent range and needs no loss scaling."""
    return torch.amp.GradScaler(device.type) if train.precision == "fp16" else None
