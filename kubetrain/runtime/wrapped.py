"""What model preparation hands the training loop (kubetrain.runtime.wrap for DDP / DataParallel,
kubetrain.runtime.fsdp for FSDP2), and the precisions it knows."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Wrapped:
    """The model as the loop needs it: `module` (for state_dict and eval: the plain module, or the
    fully_shard'ed one), `forward` (what trains, compiled when asked), `no_sync()` (a context in which
    backward skips the gradient reduction: accumulation) and the `strategy`."""

    module: nn.Module
    forward: Callable[..., Any]
    no_sync: Callable[[], contextlib.AbstractContextManager[Any]]
    strategy: str = "ddp"
    ddp: DistributedDataParallel | None = None
