"""Model preparation: SyncBatchNorm, activation checkpointing, the strategy (DDP, FSDP2, DataParallel),
torch.compile; and mixed precision."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint

from kubetrain.runtime.config import RuntimeConfigError
from kubetrain.runtime.distributed import DistEnv
from kubetrain.runtime.settings import DDP, Train
from kubetrain.runtime.wrapped import DTYPES, Wrapped


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


def _data_parallel(model: nn.Module, env: DistEnv) -> Wrapped:
    """Legacy single-process DataParallel over this process's GPUs (the module itself without GPUs)."""
    if env.world_size > 1:
        raise RuntimeConfigError(f"spec.train.strategy: dp runs one process per job, but the world has "
                                 f"{env.world_size} processes; set nodes: 1 and procsPerNode: 1, or use ddp")
    replicas: nn.Module = nn.DataParallel(model) if env.device.type == "cuda" else model
    return Wrapped(model, replicas, contextlib.nullcontext, "dp")


def meta_device(train: Train) -> contextlib.AbstractContextManager[Any]:
    """Where the model factory runs: on `meta` (shapes only, no storage) with fsdp.metaInit, else as is.
    kubetrain.runtime.fsdp materialises each rank's shards after sharding."""
    if train.strategy == "fsdp" and train.fsdp.metaInit:
        return torch.device("meta")
    return contextlib.nullcontext()


def wrap_model(model: nn.Module, train: Train, env: DistEnv) -> Wrapped:
    """Move to the device, apply the optional features in a safe order, apply the strategy, then compile."""
    if train.syncBatchNorm:
        model = convert_sync_batchnorm(model, env.device)
    if not any(p.is_meta for p in model.parameters()):  # a meta model is materialised after sharding
        model = model.to(env.device)
    if train.activationCheckpointing:
        apply_activation_checkpointing(model)
    if train.strategy == "fsdp":
        from kubetrain.runtime.fsdp import shard_model  # FSDP's torch modules only for strategy fsdp

        wrapped = shard_model(model, train, env)
    elif train.strategy == "dp":
        wrapped = _data_parallel(model, env)
    else:
        ddp = DistributedDataParallel(model, **ddp_kwargs(train.ddp, env))
        wrapped = Wrapped(model, ddp, ddp.no_sync, "ddp", ddp)
    if train.compile:
        wrapped.forward = torch.compile(wrapped.forward)
    return wrapped


def autocast(train: Train, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 or fp16 autocast; fp32 gets a no-op context (cheaper than a disabled autocast). Under fsdp the
    mixed-precision policy casts instead (parameters and inputs), so there is no autocast."""
    if train.precision == "fp32" or train.strategy == "fsdp":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[train.precision])


def resolve_precision(train: Train, device: torch.device) -> Train:
    """bf16 only on GPUs that compute it natively (compute capability 8.0+, Ampere or newer): torch emulates it
    elsewhere (a V100 passes is_bf16_supported() by default, then runs bf16 matmuls without tensor cores).
    Otherwise fp16 with a GradScaler (fp32 under fsdp, which refuses fp16), said in one line. CPUs keep bf16
    (autocast supports it everywhere; fast with AVX512-BF16/AMX)."""
    if train.precision != "bf16" or device.type != "cuda" or torch.cuda.is_bf16_supported(including_emulation=False):
        return train
    fallback: Literal["fp32", "fp16"] = "fp32" if train.strategy == "fsdp" else "fp16"
    major, minor = torch.cuda.get_device_capability(device)
    print(f"kubetrain.runtime: warning: precision bf16 needs compute capability 8.0+ (Ampere or newer), and "
          f"{torch.cuda.get_device_name(device)} is {major}.{minor}: training in {fallback}"
          f"{' with a GradScaler' if fallback == 'fp16' else ''} instead", file=sys.stderr, flush=True)
    return dataclasses.replace(train, precision=fallback)


def warn_slow_precision(train: Train, device: torch.device) -> None:
    """fp16 on a CPU is emulated: it trains several times slower than fp32 (measured about 4x)."""
    if train.precision == "fp16" and device.type == "cpu":
        print("kubetrain.runtime: warning: precision fp16 on CPU is emulated and several times slower than "
              "fp32 (about 4x measured); use fp32 or bf16 on CPU", file=sys.stderr, flush=True)


def grad_scaler(train: Train, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 only: bf16 has fp32's exponent range and needs no loss scaling."""
    return torch.amp.GradScaler(device.type) if train.precision == "fp16" else None
