"""strategy: fsdp - FSDP2 (`torch.distributed.fsdp.fully_shard`): sharded parameters, gradients, optimizer.

Units: every module whose class name is in `fsdp.wrapClasses`, else each top-level child with parameters;
then the root (which owns whatever is left). Each unit's parameters are all-gathered just before its
forward and freed after it (`reshardAfterForward`), and its gradients are reduce-scattered in backward.
Mixed precision comes from `train.precision` as a MixedPrecisionPolicy (compute in bf16, gradients reduced
in fp32); fp16 would need a sharded gradient scaler and is refused. Works on CPU with gloo (tested) and
on GPUs with nccl.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from kubetrain.runtime.config import RuntimeConfigError
from kubetrain.runtime.distributed import DistEnv
from kubetrain.runtime.settings import Train
from kubetrain.runtime.wrapped import DTYPES, Wrapped


def shard_units(model: nn.Module, class_names: list[str]) -> list[nn.Module]:
    """The submodules to shard as units (innermost first is not needed: fully_shard skips managed params)."""
    if class_names:
        wanted = set(class_names)
        units = [module for module in model.modules() if type(module).__name__ in wanted and module is not model]
        if not units:
            found = sorted({type(module).__name__ for module in model.modules()})
            raise RuntimeConfigError(f"spec.train.fsdp.wrapClasses: no module of class {sorted(wanted)} in the "
                                     f"model (its classes: {', '.join(found)})")
        return units
    return [child for child in model.children() if any(True for _ in child.parameters())]


def materialize_shards(model: nn.Module, device: torch.device) -> None:
    """Allocate this rank's shards (`to_empty`) and initialise them in place: the model's `init_weights()`
    when it has one, else every module's `reset_parameters()`. The initialisers see DTensors whose shape is
    the full parameter's, so fan-in based schemes (kaiming, xavier) compute the same bounds as unsharded."""
    model.to_empty(device=device)
    with torch.no_grad():
        init = getattr(model, "init_weights", None)
        if callable(init):
            init()
            return
        uninitialised = []
        for name, module in model.named_modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
            elif any(True for _ in module.parameters(recurse=False)):
                uninitialised.append(name or "the model itself")
        if uninitialised:
            raise RuntimeConfigError(f"spec.train.fsdp.metaInit: {', '.join(uninitialised)}: parameters but "
                                     "no reset_parameters(); give the model an init_weights() "
                                     "method that initialises them, or set metaInit: false")


def _policy(train: Train) -> MixedPrecisionPolicy:
    if train.precision == "fp16":
        raise RuntimeConfigError("spec.train.precision: fp16 is not supported with strategy fsdp (it needs a "
                                 "sharded gradient scaler); use bf16")
    if train.precision == "fp32":
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=DTYPES[train.precision], reduce_dtype=torch.float32)


def shard_model(model: nn.Module, train: Train, env: DistEnv) -> Wrapped:
    """fully_shard every unit, then the root, on a 1-D mesh of all ranks."""
    mesh = init_device_mesh(env.device.type, (env.world_size,))
    options: dict[str, Any] = {"mesh": mesh, "mp_policy": _policy(train),
                               "reshard_after_forward": train.fsdp.reshardAfterForward}
    if train.fsdp.cpuOffload:
        options["offload_policy"] = CPUOffloadPolicy()
    for unit in shard_units(model, train.fsdp.wrapClasses):
        fully_shard(unit, **options)
    fully_shard(model, **options)
    if any(p.is_meta for p in model.parameters()):
        materialize_shards(model, env.device)

    @contextlib.contextmanager
    def no_sync() -> Iterator[None]:
        # FSDP2's accumulation switch: backward keeps unsharded local gradients instead of reduce-scattering
        model.set_requires_gradient_sync(False)  # type: ignore[operator]
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)  # type: ignore[operator]

    return Wrapped(model, model, no_sync, "fsdp")
